"""The house's floors, as src/lib.rs draws them: the SQL-callable functions (src/sql/) over the
Postgres layer over the pure core, imports running down only and no circle within a floor. Read
from the sources (every `crate::module` a file names), no server: a core file that names pgrx,
or a Postgres-layer file that reaches up into src/sql/, fails here."""

import glob
import os
import re

from conftest import ROOT

CORE = {"snowflake", "horizon", "uuid7", "base62", "key_file", "lease"}
POSTGRES = {"settings", "shared", "clock", "errors", "horizon_store", "registry", "registry_client"}
SQL = {"sql"}
FLOOR = {**{m: 0 for m in CORE}, **{m: 1 for m in POSTGRES}, **{m: 2 for m in SQL}}
NAMES = ("core", "Postgres layer", "SQL functions")


def module_of(path):
    """The top-level module a source file belongs to (src/snowflake/tests.rs: snowflake)."""
    rel = os.path.relpath(path, os.path.join(ROOT, "src"))
    return rel.split(os.sep)[0].removesuffix(".rs")


def imports(text):
    """The top-level modules a file names: `crate::x`, and each name in `crate::{x, y::z}`."""
    code = "\n".join(line.split("//")[0] for line in text.splitlines())
    found = set(re.findall(r"\bcrate::(\w+)", code))
    for group in re.findall(r"\bcrate::\{([^}]*)\}", code):
        found.update(re.findall(r"(?:^|,)\s*(\w+)", group))
    return found


def sources():
    for path in sorted(glob.glob(os.path.join(ROOT, "src", "**", "*.rs"), recursive=True)):
        module = module_of(path)
        if module in ("lib", "pg_tests"):
            continue
        with open(path) as f:
            yield path, module, f.read()


def test_every_source_file_belongs_to_a_floor():
    assert {module for _, module, _ in sources()} <= set(FLOOR), "a module src/lib.rs's floors do not name"


def test_imports_run_down_only_and_the_core_never_names_pgrx():
    wrong = []
    for path, module, text in sources():
        rel = os.path.relpath(path, ROOT)
        if FLOOR[module] == 0 and re.search(r"\bpgrx\b|\bpg_sys\b", text):
            wrong.append(f"{rel}: the core names pgrx")
        for other in imports(text) - {module}:
            if other in FLOOR and FLOOR[other] > FLOOR[module]:
                wrong.append(f"{rel} ({NAMES[FLOOR[module]]}) imports {other} ({NAMES[FLOOR[other]]})")
    assert not wrong, "\n".join(wrong)


def test_no_circle_among_the_modules():
    graph = {}
    for _, module, text in sources():
        graph.setdefault(module, set()).update(m for m in imports(text) - {module} if m in FLOOR)
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
    assert imports("use crate::{clock, settings::x, shared};\nlet a = crate::sql::f(); // crate::errors") == {
        "clock", "settings", "shared", "sql"}
