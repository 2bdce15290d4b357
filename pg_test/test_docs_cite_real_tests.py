"""Every test that the README and docs/ name exists: a guarantee that cites a test file or a test
function is backed by one that runs, so renaming or removing a test fails here instead of leaving
the docs pointing at nothing. No server."""

import glob
import os
import re

from conftest import ROOT

DOCS = [os.path.join(ROOT, "README.md"), *sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))]
TEST_DIRS = ["pg_test", "pg_test/as_root", "pg_test/faults", "pg_test/clients", "pg_test/mutants", "benches"]
# `test_x.py`, `pg_test/test_x.py::test_y`, `::test_y` (a function of the file cited last),
# each possibly followed by a parameter id in brackets
CITE = re.compile(r"`(?P<file>(?:[\w./]+/)?test_\w+\.py)?(?:::(?P<func>test_\w+))?(?:\[[^\]`]*\])?`")


def cited_file(name):
    """The path of a cited test file (given bare or with its folder), or None."""
    if "/" in name:
        return os.path.join(ROOT, name) if os.path.exists(os.path.join(ROOT, name)) else None
    found = [os.path.join(ROOT, d, name) for d in TEST_DIRS if os.path.exists(os.path.join(ROOT, d, name))]
    return found[0] if found else None


def citations(text):
    """(file, function or None) for every test the text cites, in order; a bare `::test_y` takes
    the file cited last before it."""
    current = None
    for m in CITE.finditer(text):
        if m.group("file"):
            current = m.group("file")
        elif not m.group("func"):
            continue
        yield current, m.group("func")


def test_every_test_the_docs_cite_exists():
    missing, cited = [], 0
    for doc in DOCS:
        with open(doc) as f:
            text = f.read()
        for file, func in citations(text):
            cited += 1
            where = f"{os.path.relpath(doc, ROOT)}: {file}{'::' + func if func else ''}"
            path = cited_file(file) if file else None
            if path is None:
                missing.append(f"{where} (no such test file)")
                continue
            if func:
                with open(path) as f:
                    if not re.search(rf"^def {func}\(", f.read(), re.M):
                        missing.append(f"{where} (no such test in {os.path.relpath(path, ROOT)})")
    assert cited > 20, f"only {cited} citations found: is the pattern still right?"
    assert not missing, "the docs cite tests that do not exist:\n" + "\n".join(missing)


def test_the_citation_reader_follows_the_file_cited_last():
    text = "`test_a.py::test_one`, `::test_two[x]` and `pg_test/test_b.py`, then `::test_three`; `plain`"
    assert list(citations(text)) == [("test_a.py", "test_one"), ("test_a.py", "test_two"),
                                     ("pg_test/test_b.py", None), ("pg_test/test_b.py", "test_three")]


def test_the_development_guide_names_every_test_file():
    """docs/development.md's list of tests names every test file of the tree: a new file that the
    guide does not describe fails here."""
    with open(os.path.join(ROOT, "docs", "development.md")) as f:
        guide = f.read()
    files = sorted({os.path.basename(p) for d in ("pg_test", "benches")
                    for p in glob.glob(os.path.join(ROOT, d, "**", "test_*.py"), recursive=True)
                    if "node_modules" not in p and ".venv" not in p})
    assert len(files) > 30, files
    missing = [name for name in files if name not in guide]
    assert not missing, f"docs/development.md does not name: {missing}"
