"""Every SQL example in the README and docs/ runs, on a real server with idgen preloaded (worker
id 1), as a reader would run it: with psql, block after block in the order the page shows them,
each page in a database of its own. A renamed function, a changed message or two examples that
collide fail here.

How a page marks its blocks (an HTML comment on the line before the fence, invisible on GitHub):
- every fenced block names its language; the `sql` ones run, and the `sh` ones that carry a mark
  (below) run with bash, psql on the path and connected as the marks say, in a folder that holds
  the checkout's sql/ and what `make package` writes for the portable edition (target/dist/);
  on docs/portable.md every block must run (RUN_EVERY_BLOCK); `conf`, `text` ... do not;
- `<!-- example: fails 55000 -->`: the block must fail with that SQLSTATE, and each
  `-- ERROR:  text` line in it must be in the message psql prints;
- `<!-- example: db=registry -->`: run in the page's registry database (sql/registry/
  idgen_registry.sql installed, as on a registry server); `db=portable`: in a database with the
  portable edition (sql/portable/idgen_portable.sql) and no extension;
- `<!-- example: server=keyed -->`: run on a second server that has the base62 key file the
  page's shell block makes (mode 0600, named by idgen.base62_key_file);
- `<!-- example: server=fleet -->`: run on a server of a fleet with a registry: its idgen.registry
  names the database `fleet_registry` of the same server, which `db=fleet_registry` runs in (the
  registry's schema installed, under that very name, as the server's setting has it);
- `<!-- example: server=pg_tle db=pg_tle -->`: run on a server with idgen and pg_tle preloaded,
  in a database of its own with a role app (`db=keys` too; the page's own blocks create pg_tle
  and store the edition); on the versions pg_tle is built for (15 and 18) only;
- `<!-- example: user=app -->`: run as that role (psql's PGUSER), not the superuser postgres;
- `<!-- example: min=18 -->`: PostgreSQL 18's own SQL, run on 18 and later only;
- a hidden set-up, for what the reader is assumed to have already (`your table`):
  `<!-- example setup` ... `-->`, its lines run as SQL before the next block.
"""

import glob
import os
import re
import subprocess

import pytest
from conftest import ROOT
from idgen_harness import cluster, tle
from test_portable import TLE_CONF_WITH_IDGEN, TLE_VERSIONS

DOCS = [os.path.join(ROOT, "README.md"), *sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))]
MARK = re.compile(r"^<!-- example: (.*?) -->$")
# the application's role of docs/portable.md, there before the page's set-up (it may log in)
APP_ROLE = ("DO $$ BEGIN CREATE ROLE app; EXCEPTION WHEN duplicate_object THEN NULL; END $$;\n"
            "ALTER ROLE app LOGIN;\n")
DATABASES = {  # db= name: the scripts (and their psql variables) run before its first block
    "main": [],
    "registry": [(os.path.join(ROOT, "sql", "registry", "idgen_registry.sql"), {})],
    "portable": [(os.path.join(ROOT, "sql", "portable", "idgen_portable.sql"), {"worker_id": "3"})],
    # docs/portable.md's own: the page's blocks install the portable edition themselves
    "script": [(lambda: APP_ROLE + "DO $$ BEGIN CREATE ROLE writer; EXCEPTION WHEN duplicate_object THEN NULL;"
                " END $$;\n", {})],
    "keys": [(lambda: APP_ROLE, {})],
    "fleet_registry": [(os.path.join(ROOT, "sql", "registry", "idgen_registry.sql"), {})],
    "pg_tle": [(lambda: APP_ROLE, {})],
}
# The pages whose every block runs: a block that cannot is marked, or the page is wrong.
RUN_EVERY_BLOCK = ["docs/portable.md"]


class Block:
    def __init__(self, doc, line, lang, text, mark, setup):
        self.doc, self.line, self.lang, self.text, self.setup = doc, line, lang, text, setup
        self.fails, self.db, self.server, self.min_major, self.user = None, "main", "preloaded", 0, None
        self.marked = mark is not None
        for word in (mark or "").split():
            if re.fullmatch(r"[0-9A-Z]{5}", word):
                self.fails = word
            elif word.startswith("db="):
                self.db = word[3:]
            elif word in ("server=keyed", "server=preloaded", "server=pg_tle", "server=fleet"):
                self.server = word[7:]
            elif re.fullmatch(r"min=1[5-9]", word):
                self.min_major = int(word[4:])
            elif re.fullmatch(r"user=\w+", word):
                self.user = word[5:]
            elif word != "fails":
                raise ValueError(f"{self.where}: unknown example mark {word!r}")
        if self.db not in DATABASES:
            raise ValueError(f"{self.where}: no database {self.db!r} (known: {sorted(DATABASES)})")

    @property
    def where(self):
        return f"{os.path.relpath(self.doc, ROOT)}:{self.line}"


def blocks(doc, text):
    """Every fenced block of a page, in order, with its mark and any hidden set-up before it."""
    lines = text.splitlines()
    out, i, mark, setup = [], 0, None, []
    while i < len(lines):
        line = lines[i]
        if line.strip() == "<!-- example setup":
            end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "-->")
            setup += [x.strip() for x in lines[i + 1:end]]
            i = end + 1
            continue
        m = MARK.match(line.strip())
        if m:
            mark = m.group(1)
        elif line.lstrip().startswith("```"):  # in a list item too, indented
            indent = len(line) - len(line.lstrip())
            lang = line.strip()[3:].strip()
            end = next(j for j in range(i + 1, len(lines)) if lines[j].lstrip().startswith("```"))
            body = [x[indent:] if x[:indent].isspace() else x for x in lines[i + 1:end]]
            out.append(Block(doc, i + 1, lang, "\n".join(body), mark, "\n".join(setup)))
            mark, setup, i = None, [], end + 1
            continue
        elif line.strip():
            mark = None
        i += 1
    return out


def page_blocks():
    for doc in DOCS:
        with open(doc) as f:
            yield doc, blocks(doc, f.read())


def psql(server, db, sql, variables=None, user=None):
    """(exit code, output) of the text run by psql as a reader would, stopping at the first error,
    with the SQLSTATE in every error line."""
    sets = [a for k, v in (variables or {}).items() for a in ("-v", f"{k}={v}")]
    done = subprocess.run([os.path.join(cluster.pg_bin(), "psql"), "-X", "-v", "ON_ERROR_STOP=1",
                           "-v", "VERBOSITY=verbose", *sets, "-f", "-"],
                          input=sql, capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={**os.environ, **server.env(db), **({"PGUSER": user} if user else {})})
    return done.returncode, done.stdout + done.stderr


def shell(server, db, text, folder, user=None):
    """(exit code, output) of a page's sh block, run by bash -e in FOLDER with the server's psql
    first on the path and connected to DB (as USER, else postgres); every psql stops at its first
    error (a psqlrc with ON_ERROR_STOP), and an ERROR printed counts as a failure too."""
    env = {**os.environ, **server.env(db), "PSQLRC": os.path.join(folder, ".psqlrc"),
           "PATH": f"{cluster.pg_bin()}:{os.environ['PATH']}", **({"PGUSER": user} if user else {})}
    done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", text], capture_output=True, text=True,
                          timeout=120, cwd=folder, env=env)
    out = done.stdout + done.stderr
    return (done.returncode or (1 if re.search(r"^(psql:\S+ )?ERROR:", out, re.M) else 0)), out


@pytest.fixture(scope="module")
def reader_folder(tmp_path_factory):
    """Where a page's sh blocks run: the checkout's sql/ and the portable edition's package as
    `make package` writes it (target/dist/idgen_portable-<version>/, by idgen_harness.tle)."""
    folder = tmp_path_factory.mktemp("reader")
    os.symlink(os.path.join(ROOT, "sql"), folder / "sql")
    tle.write(str(folder / "target" / "dist" / f"{tle.NAME}-{tle.version()}"))
    (folder / ".psqlrc").write_text("\\set ON_ERROR_STOP on\n\\set VERBOSITY verbose\n")  # for shell()
    return str(folder)


def test_every_block_of_the_pages_that_run_every_block_runs():
    """On RUN_EVERY_BLOCK's pages every fenced block runs: SQL, or a shell block with a mark."""
    idle = []
    for page in RUN_EVERY_BLOCK:
        path = os.path.join(ROOT, page)
        with open(path) as f:
            idle += [f"{b.where} ({b.lang})" for b in blocks(path, f.read())
                     if not (b.lang == "sql" or (b.lang == "sh" and b.marked))]
    assert not idle, "blocks that no test runs (a shell block runs once marked, e.g. <!-- example: db=... -->):\n" \
                     + "\n".join(idle)


def test_every_fenced_block_names_its_language():
    unnamed = [f"{b.where}" for _, bs in page_blocks() for b in bs if not b.lang]
    assert not unnamed, "fenced blocks with no language (sql ones must say so, to run):\n" + "\n".join(unnamed)


@pytest.fixture(scope="module")
def pg_tle(module_factory):
    """A server with idgen and pg_tle preloaded, for the pg_tle edition's pages."""
    return module_factory("pg_tle", conf=[TLE_CONF_WITH_IDGEN])


@pytest.fixture(scope="module")
def keyed(module_factory):
    """A server with the base62 key file that docs/base62.md's shell block makes."""
    c = module_factory("keyed")
    path = os.path.join(c.data_dir, "idgen_base62.key")
    with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        f.write("a long random passphrase\n")
    c.q("ALTER SYSTEM SET idgen.base62_key_file = 'idgen_base62.key'")
    c.stop()
    c.start()
    return c


@pytest.fixture(scope="module")
def fleet(module_factory):
    """A server whose idgen.registry is the database fleet_registry on itself, as role srv: the
    page's own blocks install nothing there but what they show (the schema is the database's)."""
    c = module_factory("fleet", start=False)
    c.append_conf(f"idgen.registry = 'host=127.0.0.1 port={c.port} dbname=fleet_registry user=srv'")
    c.start()
    c.q("CREATE ROLE idgen_fleet NOLOGIN", "CREATE ROLE srv LOGIN IN ROLE idgen_fleet")
    return c


# Databases a server's settings name: made under their own name, not the page's.
FIXED_NAMES = {"fleet_registry"}


def runs(b):
    """Whether a block is run: SQL, or a shell block with a mark."""
    return b.lang == "sql" or (b.lang == "sh" and b.marked)


def pages_with_sql():
    """The pages that show SQL at all (a page without any is no case: it could only skip)."""
    found = []
    for d in DOCS:
        with open(d) as f:
            if any(runs(b) for b in blocks(d, f.read())):
                found.append(os.path.relpath(d, ROOT))
    return found


@pytest.mark.parametrize("doc", pages_with_sql())
def test_every_sql_example_of_the_page_runs_as_shown(request, pg_major, doc, reader_folder):
    path = os.path.join(ROOT, doc)
    with open(path) as f:
        examples = [b for b in blocks(path, f.read()) if runs(b) and b.min_major <= pg_major
                    and (b.server != "pg_tle" or pg_major in TLE_VERSIONS)]
    if not examples:
        pytest.skip(f"{doc} shows SQL only for a later PostgreSQL than {pg_major}")
    slug = re.sub(r"\W", "_", os.path.splitext(doc)[0]).lower()
    made = set()
    wrong = []
    for b in examples:
        server = request.getfixturevalue(b.server)
        db = b.db if b.db in FIXED_NAMES else f"docs_{slug}_{b.db}"
        if (server, db) not in made:
            server.q(f"DROP DATABASE IF EXISTS {db}", f"CREATE DATABASE {db}")
            for script, variables in DATABASES[b.db]:
                if callable(script):
                    rc, out = psql(server, db, script(), variables)
                else:
                    with open(script) as f:
                        rc, out = psql(server, db, f.read(), variables)
                assert rc == 0, f"installing {script} into {db}: {out}"
            made.add((server, db))
        if b.setup:
            rc, out = psql(server, db, b.setup)
            assert rc == 0, f"{b.where}: the hidden set-up failed:\n{out}"
        if b.lang == "sh":
            rc, out = shell(server, db, b.text, reader_folder, b.user)
        else:
            rc, out = psql(server, db, b.text, user=b.user)
        if b.fails is None:
            if rc != 0:
                wrong.append(f"{b.where}: failed:\n{out.strip()[-1500:]}")
            continue
        if rc == 0:
            wrong.append(f"{b.where}: should fail with {b.fails}, but ran:\n{out.strip()[-800:]}")
            continue
        if f"ERROR:  {b.fails}:" not in out:
            wrong.append(f"{b.where}: should fail with {b.fails}, failed otherwise:\n{out.strip()[-800:]}")
        for shown in re.findall(r"^-- ERROR:\s+(.*)$", b.text, re.M):
            if shown.strip() not in out:
                wrong.append(f"{b.where}: the error shown, {shown.strip()!r}, is not what psql printed:\n"
                             f"{out.strip()[-800:]}")
    for server, db in made:
        server.q(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
    assert not wrong, "\n\n".join(wrong)


def test_the_reader_of_marks_and_blocks():
    text = "\n".join([
        "<!-- example setup", "CREATE TABLE t (a int);", "-->",
        "<!-- example: fails 22023 db=registry -->", "```sql", "SELECT 1;", "-- ERROR:  boom", "```",
        "```sh", "make", "```", "<!-- example: fails 42501 -->", "", "prose", "  ```sql", "  SELECT 2;", "  ```"])
    got = blocks("/x.md", text)
    assert [(b.lang, b.fails, b.db, b.setup) for b in got] == [
        ("sql", "22023", "registry", "CREATE TABLE t (a int);"), ("sh", None, "main", ""), ("sql", None, "main", "")]
    assert got[2].text == "SELECT 2;"
    with pytest.raises(ValueError):
        blocks("/x.md", "<!-- example: db=nowhere -->\n```sql\nSELECT 1;\n```")
