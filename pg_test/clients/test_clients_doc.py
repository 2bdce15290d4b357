"""docs/clients.md shows the code the client tests run, not a paraphrase of it: every fenced block
of the page is, line for line, a marked region of a client's source (dedented), and every marked
region is on the page. No server: the client tests run the regions (test_python_orms.py,
test_node.py, test_jdbc.py, test_activerecord.py, test_rust.py, test_pagination.py).

How they are marked:
- on the page, an HTML comment on the line before the fence (invisible on GitHub) names the file
  and the region: `<!-- snippet: pg_test/clients/node/keys.js knex -->`;
- in the source, comment lines in the file's language around the region:
  `// docs/clients.md: knex` ... `// end docs/clients.md` (`#` in Python and Ruby, `--` in SQL).
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
MARK = re.compile(r"^<!-- snippet: (?P<path>\S+) (?P<name>[\w-]+) -->$")
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
        found = source_regions(full)
        if name not in found:
            problems.append(f"{where}: {path} has no region {name!r} (it has {sorted(found)})")
            continue
        diff = differences(body, found[name])
        if diff:
            problems.append(f"{where}: the block is not {path}'s region {name!r}:\n" + "\n".join(diff))
    assert not problems, "\n".join(problems)


def test_every_region_of_the_client_sources_is_on_the_page():
    shown = {mark for _, mark, _ in page_blocks() if mark}
    regions_found = {(os.path.relpath(p, ROOT), name) for p in client_sources() for name in source_regions(p)}
    assert len(regions_found) >= 8, sorted(regions_found)
    assert not regions_found - shown, f"regions marked for docs/clients.md that it does not show: " \
                                      f"{sorted(regions_found - shown)}"


def test_the_reader_tells_a_changed_line_a_missing_mark_and_a_broken_region():
    source = "x = 1\n    # docs/clients.md: one\n    a = f(x)\n\n    b = g(a)  # b\n    # end docs/clients.md\n"
    assert regions(source) == {"one": "a = f(x)\n\nb = g(a)  # b"}
    page = ("text\n\n<!-- snippet: pg_test/clients/x.py one -->\n```python\na = f(x)\n\nb = g(a)  # b \n```\n\n"
            "```js\nlet y;\n```\n")
    (l1, mark, body), (l2, none, _) = fenced_blocks(page)
    assert (l1, mark, l2, none) == (4, ("pg_test/clients/x.py", "one"), 10, None)
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
