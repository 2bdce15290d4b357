"""The house's floors, as src/lib.rs draws them, each a folder: the SQL-callable functions
(src/sql/) over the Postgres layer (src/pg/) over the pure core (src/core/, the crate
idgen_core), imports running down only and no circle among the modules. The compiler keeps the
core pure (its crate has no pgrx to import: the Cargo.lock walk below proves it has none, even
indirectly); these tests keep the rest, from the sources, with no server. And the Python side:
pg_test/ and benches/ share the package idgen_harness, import nothing of each other's, and
never change sys.path (docs/development.md)."""

import ast
import glob
import os
import re
import tomllib

from conftest import ROOT

FLOORS = ("core", "Postgres layer", "SQL functions")
FOLDERS = {"core/src": 0, "pg": 1, "sql": 2}


def module_of(path):
    """(floor, module) of a source file: src/core/src/snowflake/tests.rs is (0, 'snowflake'),
    src/pg/registry.rs (1, 'pg::registry'), src/sql/uuid7.rs (2, 'sql::uuid7')."""
    rel = os.path.relpath(path, os.path.join(ROOT, "src")).replace(os.sep, "/")
    for folder, floor in FOLDERS.items():
        if rel.startswith(folder + "/"):
            name = rel[len(folder) + 1:].split("/")[0].removesuffix(".rs")
            if floor == 0:
                return 0, name
            if floor == 1:
                return 1, f"pg::{name}"
            return 2, f"sql::{name}"
    return None, rel


def imports(text, floor):
    """The modules a file names, as (floor, module): `idgen_core::x` and, in the core,
    `crate::x` are the core's; `crate::pg::x` the Postgres layer's; `crate::sql::x` the SQL
    functions' (a bare `crate::sql`: the folder's index). Grouped forms (`crate::pg::{a, b::c}`)
    count each name."""
    code = "\n".join(line.split("//")[0] for line in text.splitlines())
    found = set()

    def names(prefix):
        single = set(re.findall(rf"\b{prefix}::(\w+)", code))
        for group in re.findall(rf"\b{prefix}::\{{([^}}]*)\}}", code):
            single.update(re.findall(r"(?:^|,)\s*(\w+)", group))
        return single

    for name in names("idgen_core"):
        found.add((0, name))
    if floor == 0:
        for name in names("crate"):
            found.add((0, name))
        return found
    for name in names(r"crate::pg"):
        found.add((1, f"pg::{name}"))
    for name in names(r"crate::sql"):
        found.add((2, f"sql::{name}"))
    if re.search(r"\bcrate::sql\b(?!::)", code):
        found.add((2, "sql::mod"))
    return found


def sources():
    for path in sorted(glob.glob(os.path.join(ROOT, "src", "**", "*.rs"), recursive=True)):
        rel = os.path.relpath(path, ROOT)
        if rel in ("src/lib.rs", "src/pg_tests.rs", "src/core/src/lib.rs", "src/pg/mod.rs", "src/sql/mod.rs"):
            continue  # the wiring: it names every module of its floor
        with open(path) as f:
            yield rel, *module_of(path), f.read()


def test_every_source_file_is_in_a_floors_folder():
    stray = [rel for rel, floor, _, _ in sources() if floor is None]
    assert not stray, f"source files outside src/core/src, src/pg and src/sql: {stray}"


def test_imports_run_down_only_and_no_file_above_the_core_is_imported_by_it():
    wrong = []
    for rel, floor, _, text in sources():
        if floor == 0 and re.search(r"\bpgrx\b|\bpg_sys\b", text):
            wrong.append(f"{rel}: the core names pgrx")
        for other_floor, other in imports(text, floor):
            if other_floor > floor:
                wrong.append(f"{rel} ({FLOORS[floor]}) imports {other} ({FLOORS[other_floor]})")
    assert not wrong, "\n".join(wrong)


def test_no_sql_function_file_imports_another():
    """The SQL functions are thin: each file calls down into the Postgres layer and the core, never
    sideways into another family's file (where uuid_v7() once raised snowflake's errors)."""
    sideways = [f"{rel} imports {other}" for rel, floor, module, text in sources() if floor == 2
                for other_floor, other in imports(text, floor) if other_floor == 2 and other != module]
    assert not sideways, "\n".join(sideways)


def lock_packages():
    with open(os.path.join(ROOT, "Cargo.lock"), "rb") as f:
        return {p["name"]: p for p in tomllib.load(f)["package"]}


def dependencies(name, packages):
    """Every package `name` depends on, directly or not, as Cargo.lock resolved them."""
    seen, todo = set(), [name]
    while todo:
        for dep in packages[todo.pop()].get("dependencies", []):
            dep = dep.split(" ")[0]  # "name version" where two versions are locked
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def test_the_core_crate_cannot_reach_pgrx_or_the_extension():
    with open(os.path.join(ROOT, "src", "core", "Cargo.toml"), "rb") as f:
        manifest = tomllib.load(f)
    assert manifest["package"]["name"] == "idgen-core"
    reached = dependencies("idgen-core", lock_packages())
    assert not {d for d in reached if d.startswith("pgrx") or d in ("idgen", "pq-sys")}, sorted(reached)
    assert "siphasher" in reached  # the walk reads the lock: the core's own pins are found


def test_the_extension_depends_on_the_core_crate():
    assert "idgen-core" in dependencies("idgen", lock_packages())


def test_no_circle_among_the_modules():
    graph = {}
    for _, floor, module, text in sources():
        graph.setdefault(module, set()).update(m for _, m in imports(text, floor) if m != module)
    circles = []

    def visit(node, path):
        for nxt in sorted(graph.get(node, ())):
            if nxt in path:
                circles.append(" -> ".join(path[path.index(nxt):] + [nxt]))
            else:
                visit(nxt, path + [nxt])
    for start in sorted(graph):
        visit(start, [start])
    assert not circles, "import circles:\n" + "\n".join(sorted(set(circles)))


def test_the_reader_sees_grouped_and_plain_imports():
    text = "use crate::pg::{clock, settings::x};\nuse idgen_core::{lease, snowflake::Y};\n" \
           "let a = crate::sql::f(); // crate::pg::errors"
    assert imports(text, 1) == {(1, "pg::clock"), (1, "pg::settings"), (0, "lease"), (0, "snowflake"), (2, "sql::f")}
    assert imports("crate::sql::snowflake::raise(e)", 2) == {(2, "sql::snowflake")}
    assert imports("use crate::snowflake::MAX_WORKER_ID;", 0) == {(0, "snowflake")}


def drawing():
    """The imports between modules, floor by floor, top down: what docs/development.md shows."""
    graph = {}
    for _, floor, module, text in sources():
        graph.setdefault((floor, module), set()).update(m for m in imports(text, floor) if m[1] != module)
    lines = []
    for floor in (2, 1, 0):
        lines.append(f"{FLOORS[floor]}:")
        for (f, module), targets in sorted(graph.items()):
            if f == floor:
                names = ", ".join(m for _, m in sorted(targets, key=lambda t: (-t[0], t[1])))
                lines.append(f"  {module} -> {names}" if names else f"  {module}")
    return "\n".join(lines)


def test_the_drawing_in_the_docs_is_the_imports_as_they_are():
    with open(os.path.join(ROOT, "docs", "development.md")) as f:
        text = f.read()
    m = re.search(r"<!-- imports: .*? -->\n```text\n(.*?)\n```", text, re.S)
    assert m, "docs/development.md has no drawing of the imports"
    assert m.group(1) == drawing(), "the drawing is out of date; it is now:\n" + drawing()


# ---- the Python side: one shared package, no path tricks ------------------------------------------

PACKAGE = os.path.join("benches", "idgen_harness")


def python_files(folder):
    """The Python files under a folder, relative to ROOT: *.py, and the scripts whose first line
    names python (benches/run, benches/speed, ...)."""
    for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, folder)):
        # what tools leave behind (a ruff cache holds binary files whose first line names python)
        dirnames[:] = [d for d in dirnames
                       if d not in ("node_modules", "target", "__pycache__") and not d.startswith(".")]
        for name in filenames:
            path = os.path.join(dirpath, name)
            if not name.endswith(".py"):
                with open(path, "rb") as f:
                    if b"python" not in f.readline():
                        continue
            yield os.path.relpath(path, ROOT)


def side(rel):
    """'package', 'pg_test' or 'benches': whose a Python file is."""
    if rel.startswith(PACKAGE + os.sep):
        return "package"
    return rel.split(os.sep)[0]


def module_names(rel_paths):
    """The names a file of these is imported by: its file name without .py."""
    return {os.path.basename(r).removesuffix(".py") for r in rel_paths}


def imported(text):
    """The top-level modules a Python source imports (absolute imports only)."""
    names = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def python_sources():
    files = [*python_files("pg_test"), *python_files("benches")]
    texts = {}
    for rel in files:
        with open(os.path.join(ROOT, rel)) as f:
            texts[rel] = f.read()
    return texts


def path_changes(texts):
    """Each line of code that changes sys.path: sys.path.insert/append/extend(...), or sys.path
    (or an item of it) assigned to. Code only: a string or a comment that names it is no change."""

    def is_sys_path(n):
        if isinstance(n, ast.Subscript):
            n = n.value
        return isinstance(n, ast.Attribute) and n.attr == "path" and isinstance(n.value, ast.Name) \
            and n.value.id == "sys"

    def changes(node):
        if isinstance(node, ast.Attribute) and node.attr in ("insert", "append", "extend"):
            return is_sys_path(node.value)
        if isinstance(node, ast.Assign):
            return any(is_sys_path(t) for t in node.targets)
        return isinstance(node, ast.AugAssign) and is_sys_path(node.target)

    found = sorted({(rel, node.lineno) for rel, text in texts.items() for node in ast.walk(ast.parse(text))
                    if changes(node)})
    return [f"{rel}:{n}: {texts[rel].splitlines()[n - 1].strip()}" for rel, n in found]


def cross_imports(texts):
    """Imports across the line: a pg_test/ file importing a benches/ file or the other way round,
    or the package importing either (it is whole by itself: it imports only its own modules,
    the standard library and the venv's)."""
    own = {s: module_names(r for r in texts if side(r) == s) for s in ("pg_test", "benches")}
    wrong = []
    for rel, text in texts.items():
        mine = side(rel)
        others = {"pg_test": ["benches"], "benches": ["pg_test"], "package": ["pg_test", "benches"]}[mine]
        for name in sorted(imported(text)):
            for other in others:
                if name in own[other] and not (mine != "package" and name in own[mine]):
                    wrong.append(f"{rel} ({mine}) imports {name} ({other})")
    return wrong


def test_no_python_file_of_the_tests_or_the_benchmarks_changes_sys_path():
    changes = path_changes(python_sources())
    assert not changes, "import the package idgen_harness instead:\n" + "\n".join(changes)


def test_the_tests_and_the_benchmarks_import_the_package_not_each_other():
    texts = python_sources()
    assert "benches/idgen_harness/cluster.py" in texts and "benches/run" in texts and "pg_test/conftest.py" in texts
    wrong = cross_imports(texts)
    assert not wrong, "\n".join(wrong)
    users = {side(r) for r, t in texts.items() if "idgen_harness" in imported(t)}
    assert users == {"pg_test", "benches", "package"}, users


def test_the_readers_see_a_path_change_and_a_crossing_import():
    code = "import sys\nsys.path.insert(0, HERE)\nsys.path += ['a']\nprint(sys.path)  # sys.path.append\n" \
           "sys.path[:0] = ['b']\nx = 'sys.path.insert(0, x)'\n"
    assert path_changes({"x.py": code}) == ["x.py:2: sys.path.insert(0, HERE)", "x.py:3: sys.path += ['a']",
                                            "x.py:5: sys.path[:0] = ['b']"]
    texts = {"pg_test/test_a.py": "import study\nfrom idgen_harness import cluster\n",
             "benches/study.py": "from conftest import ROOT\n", "pg_test/conftest.py": "import os\n",
             "benches/idgen_harness/report.py": "import pgconn\nfrom . import nbtree_model\n",
             "benches/pgconn.py": ""}
    assert cross_imports(texts) == ["pg_test/test_a.py (pg_test) imports study (benches)",
                                    "benches/study.py (benches) imports conftest (pg_test)",
                                    "benches/idgen_harness/report.py (package) imports pgconn (benches)"]
