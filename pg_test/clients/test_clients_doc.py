"""docs/clients.md shows the code the client tests run, not a paraphrase of it, so that every block
runs as printed: every fenced block of the page is, line for line, either a whole file of
pg_test/clients/ (a program, or a module of the Django project) without its opening comment, or a
marked region of one (dedented); every file shown whole is run by a client test, and every marked
region is on the page. No server: the client tests run the files (test_python_orms.py,
test_node.py, test_jdbc.py, test_activerecord.py, test_rust.py, test_pagination.py), so a block
that stops running fails its stack's test.

How they are marked, on the page, with an HTML comment on the line before the fence (invisible on
GitHub):
- a whole file: `<!-- snippet: pg_test/clients/node/knex_orders.js -->`; the file's opening
  comment (a Python docstring, or its first comment lines) is left off the page;
- a region: `<!-- snippet: pg_test/clients/test_pagination.py pages -->`, and in the source,
  comment lines in the file's language around the region: `# docs/clients.md: pages` ...
  `# end docs/clients.md` (`//` in JavaScript, Java and Rust, `--` in SQL).
"""
import difflib
import os
import re
import textwrap

from conftest import ROOT

DOC = os.path.join(ROOT, "docs", "clients.md")
CLIENTS = os.path.join(ROOT, "pg_test", "clients")
SOURCES = (".py", ".js", ".java", ".rb", ".rs")
SKIP_DIRS = {"node_modules", "target", "__pycache__"}
MARK = re.compile(r"^<!-- snippet: (?P<path>\S+)(?: (?P<name>[\w-]+))? -->$")
WHOLE = None  # the name of a mark that shows a whole file
COMMENT = re.compile(r"^\s*(?://|#|--)")
START = re.compile(r"^\s*(?:#|//|--) docs/clients\.md: (?P<name>[\w-]+)\s*$")
END = re.compile(r"^\s*(?:#|//|--) end docs/clients\.md\s*$")


def fenced_blocks(text):
    """(line number, (path, name) or None, body) for every fenced block of a page, in order; the
    mark is the line just before the fence."""
    lines = text.splitlines()
    out, i = [], 0
    while i < len(lines):
        if lines[i].lstrip().startswith("```"):
            end = next(j for j in range(i + 1, len(lines)) if lines[j].lstrip().startswith("```"))
            m = MARK.match(lines[i - 1].strip()) if i else None
            out.append((i + 1, (m.group("path"), m.group("name")) if m else None, "\n".join(lines[i + 1:end])))
            i = end
        i += 1
    return out


def regions(text, where="source"):
    """{name: the lines between its marks, dedented} of a source; a mark left open, an end with no
    start, a region inside another or a name used twice raise ValueError."""
    out, name, body = {}, None, []
    for n, line in enumerate(text.splitlines(), 1):
        start, end = START.match(line), END.match(line)
        if start:
            if name is not None:
                raise ValueError(f"{where}:{n}: region {start.group('name')!r} inside {name!r}")
            if start.group("name") in out:
                raise ValueError(f"{where}:{n}: region {start.group('name')!r} twice")
            name, body = start.group("name"), []
        elif end:
            if name is None:
                raise ValueError(f"{where}:{n}: an end of region with no start")
            out[name], name = textwrap.dedent("\n".join(body)), None
        elif name is not None:
            body.append(line)
    if name is not None:
        raise ValueError(f"{where}: region {name!r} never ends")
    return out


def without_opening_comment(text):
    """A file as the page shows it whole: without its opening comment (a Python module's
    docstring, else its first comment lines) and the blank lines after it."""
    lines = text.splitlines()
    i = 0
    if lines and lines[0].startswith('"""'):
        i = 1 + next(j for j, line in enumerate(lines)
                     if line.rstrip().endswith('"""') and (j or line.count('"""') == 2))
    else:
        while i < len(lines) and COMMENT.match(lines[i]):
            i += 1
    while i < len(lines) and not lines[i].strip():
        i += 1
    return "\n".join(lines[i:])


def differences(block, region):
    """The lines in which a page's block and a source's region differ (trailing spaces aside), as a
    diff; empty when they are the same."""
    a = [x.rstrip() for x in block.strip("\n").splitlines()]
    b = [x.rstrip() for x in region.strip("\n").splitlines()]
    return list(difflib.unified_diff(b, a, "source", "docs/clients.md", lineterm="", n=1))


def client_sources():
    for folder, dirs, files in os.walk(CLIENTS):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        for f in sorted(files):
            if f.endswith(SOURCES):
                yield os.path.join(folder, f)


def source_regions(path):
    with open(path) as f:
        return regions(f.read(), os.path.relpath(path, ROOT))


def page_blocks():
    with open(DOC) as f:
        return fenced_blocks(f.read())


def test_every_block_of_the_page_is_a_region_of_a_client_source():
    blocks, problems = page_blocks(), []
    assert len(blocks) >= 8, "the page's blocks: is the reader still right?"
    for line, mark, body in blocks:
        where = f"docs/clients.md:{line}"
        if mark is None:
            problems.append(f"{where}: no <!-- snippet: <file> <region> --> on the line before the fence")
            continue
        path, name = mark
        full = os.path.join(ROOT, path)
        if not path.startswith("pg_test/clients/") or not os.path.isfile(full):
            problems.append(f"{where}: {path} is no file of pg_test/clients/")
            continue
        if name is WHOLE:
            with open(full) as f:
                diff = differences(body, without_opening_comment(f.read()))
            if diff:
                problems.append(f"{where}: the block is not {path}, whole:\n" + "\n".join(diff))
            continue
        found = source_regions(full)
        if name not in found:
            problems.append(f"{where}: {path} has no region {name!r} (it has {sorted(found)})")
            continue
        diff = differences(body, found[name])
        if diff:
            problems.append(f"{where}: the block is not {path}'s region {name!r}:\n" + "\n".join(diff))
    assert not problems, "\n".join(problems)


def test_every_file_the_page_shows_whole_is_run_by_a_client_test():
    """A program shown whole is named by the client test that runs it, or a file of a project
    (the Django app, the Rust crate, the Node packages' folder) by that project's folder."""
    tests = ""
    for f in sorted(os.listdir(CLIENTS)):
        if f.startswith("test_") and f.endswith(".py") and f != "test_clients_doc.py":
            with open(os.path.join(CLIENTS, f)) as t:
                tests += t.read()
    shown = [mark[0] for _, mark, _ in page_blocks() if mark and mark[1] is WHOLE]
    assert len(shown) >= 10, shown
    unrun = []
    for path in shown:
        rel = os.path.relpath(os.path.join(ROOT, path), CLIENTS)
        folder = rel.split(os.sep)[0] if os.sep in rel else None  # a project the test runs whole
        if os.path.basename(rel) not in tests and (folder is None or folder not in tests):
            unrun.append(path)
    assert not unrun, f"shown whole on docs/clients.md but run by no client test: {unrun}"


def test_every_region_of_the_client_sources_is_on_the_page():
    shown = {mark for _, mark, _ in page_blocks() if mark}
    regions_found = {(os.path.relpath(p, ROOT), name) for p in client_sources() for name in source_regions(p)}
    assert regions_found, "the reader finds the page's regions: is it still right?"
    assert not regions_found - shown, f"regions marked for docs/clients.md that it does not show: " \
                                      f"{sorted(regions_found - shown)}"


def test_the_reader_tells_a_changed_line_a_missing_mark_and_a_broken_region():
    source = "x = 1\n    # docs/clients.md: one\n    a = f(x)\n\n    b = g(a)  # b\n    # end docs/clients.md\n"
    assert regions(source) == {"one": "a = f(x)\n\nb = g(a)  # b"}
    page = ("text\n\n<!-- snippet: pg_test/clients/x.py one -->\n```python\na = f(x)\n\nb = g(a)  # b \n```\n\n"
            "```js\nlet y;\n```\n")
    (l1, mark, body), (l2, none, _) = fenced_blocks(page)
    assert (l1, mark, l2, none) == (4, ("pg_test/clients/x.py", "one"), 10, None)
    whole = fenced_blocks("<!-- snippet: pg_test/clients/x.js -->\n```js\n```\n")[0][1]
    assert whole == ("pg_test/clients/x.js", WHOLE)
    assert without_opening_comment('"""Doc.\n\nmore"""\nimport x\n') == "import x"
    assert without_opening_comment('"""One line."""\n\nimport x\n') == "import x"
    assert without_opening_comment("// a\n// b\n'use strict';\n// c\nx();\n") == "'use strict';\n// c\nx();"
    assert differences(body, regions(source)["one"]) == []
    changed = differences(body.replace("g(a)", "h(a)"), regions(source)["one"])
    assert "-b = g(a)  # b" in changed and "+b = h(a)  # b" in changed
    for broken in ("# docs/clients.md: a\n# docs/clients.md: b\n", "# end docs/clients.md\n",
                   "# docs/clients.md: a\nx\n", "# docs/clients.md: a\n# end docs/clients.md\n" * 2):
        try:
            regions(broken)
        except ValueError:
            continue
        raise AssertionError(f"not refused: {broken!r}")
