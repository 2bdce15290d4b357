"""The house's floors, as src/lib.rs draws them, each a folder: the SQL-callable functions
(src/sql/) over the Postgres layer (src/pg/) over the pure core (src/core/, the crate
idgen_core), imports running down only and no circle among the modules. The compiler keeps the
core pure (its crate has no pgrx to import: the Cargo.lock walk below proves it has none, even
indirectly); these tests keep the rest, from the sources, with no server."""

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
