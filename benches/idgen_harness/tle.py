"""The portable edition as a pg_tle extension, written from the psql edition's own source: the
script is sql/portable/pg_tle_adopt.sql (taking in an install of the psql edition in the same
schema), then sql/portable/idgen_portable.sql without its `-- @psql-only {` ... `-- @psql-only }`
regions (psql's variables, BEGIN and COMMIT, the call that installs with the variables), followed
by sql/portable/pg_tle.sql (the configuration table, its trigger, idgen_portable_configure()).
Nothing is written twice by hand: a change to the psql edition is a change to the extension.

    python -m idgen_harness.tle OUTDIR     # idgen_portable.control, idgen_portable--V.sql and
                                           # idgen_portable--V.pgtle.sql (the pgtle.install_extension call)

The package follows database.dev's layout (a control file and one SQL file per version); the
.pgtle.sql file is the same script wrapped for a psql session on a server with pg_tle."""

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PORTABLE = os.path.join(ROOT, "sql", "portable", "idgen_portable.sql")
TLE_PART = os.path.join(ROOT, "sql", "portable", "pg_tle.sql")
ADOPT = os.path.join(ROOT, "sql", "portable", "pg_tle_adopt.sql")
NAME = "idgen_portable"
DESCRIPTION = "idgen's portable edition: snowflake ids, UUIDv7 and base62 in SQL and PL/pgSQL"
BEGIN, END = "-- @psql-only {", "-- @psql-only }"
# a meta-command at a line's start or a query's end (\gset, \gexec), or a variable (:'x', :"x", :{?x})
PSQL = re.compile(r"^\s*\\[a-z]|\\g(set|exec)\b|:'\w+'|:\"\w+\"|:\{\?")
TAG = "$_idgen_portable_$"  # the dollar quote around the script in the install_extension() call


def version():
    """The project's version, from Cargo.toml: the portable edition is released with the extension."""
    with open(os.path.join(ROOT, "Cargo.toml")) as f:
        return re.search(r'^version = "([^"]+)"', f.read(), re.M).group(1)


def without_psql_only(text, path=PORTABLE):
    """text without its psql-only regions; fails on a region left open or a psql command outside one."""
    out, inside = [], False
    for n, line in enumerate(text.splitlines(keepends=True), 1):
        if line.startswith(BEGIN):
            if inside:
                raise ValueError(f"{path}:{n}: a psql-only region opened inside another")
            inside = True
        elif line.startswith(END):
            if not inside:
                raise ValueError(f"{path}:{n}: a psql-only region closed that was not open")
            inside = False
        elif not inside:
            if PSQL.search(line):
                raise ValueError(f"{path}:{n}: psql's syntax outside a psql-only region: {line.strip()}")
            out.append(line)
    if inside:
        raise ValueError(f"{path}: a psql-only region is never closed")
    return "".join(out)


def script():
    """The extension's install script, which is also its update script (sql/portable/pg_tle.sql)."""
    with open(PORTABLE) as f:
        shared = without_psql_only(f.read())
    with open(TLE_PART) as f:
        tle = f.read()
    with open(ADOPT) as f:
        adopt = f.read()
    head = (f"-- {NAME} {version()}, the pg_tle edition of idgen's portable edition: written by\n"
            "-- benches/idgen_harness/tle.py from sql/portable/idgen_portable.sql (without its psql-only\n"
            "-- regions), after sql/portable/pg_tle_adopt.sql and before sql/portable/pg_tle.sql. Edit\n"
            "-- those, not this.\n\n")
    text = head + adopt + "\n" + shared + "\n" + tle
    if TAG in text:
        raise ValueError(f"the script holds {TAG}, the dollar quote that wraps it")
    return text


def control(default_version=None):
    return (f"comment = '{DESCRIPTION}'\n"
            f"default_version = '{default_version or version()}'\n"
            "relocatable = false\n"
            "superuser = false\n"
            "trusted = true\n")


def install_call(text=None, ver=None):
    """The SQL that stores the script in a database with pg_tle (as a role with pgtle_admin)."""
    ver = ver or version()
    return (f"SELECT pgtle.install_extension('{NAME}', '{ver}', '{DESCRIPTION.replace(chr(39), chr(39) * 2)}',\n"
            f"{TAG}\n{text or script()}{TAG});\n")


def update_call(old, new, text=None):
    """The SQL that stores the update path old -> new (the script, run over the installed one)."""
    return f"SELECT pgtle.install_update_path('{NAME}', '{old}', '{new}',\n{TAG}\n{text or script()}{TAG});\n"


def write(outdir):
    os.makedirs(outdir, exist_ok=True)
    ver, text = version(), script()
    files = {f"{NAME}.control": control(), f"{NAME}--{ver}.sql": text, f"{NAME}--{ver}.pgtle.sql": install_call(text)}
    for name, body in files.items():
        with open(os.path.join(outdir, name), "w") as f:
            f.write(body)
    return [os.path.join(outdir, n) for n in files]


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m idgen_harness.tle OUTDIR")
    for path in write(sys.argv[1]):
        print(path)
