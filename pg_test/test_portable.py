"""The portable edition (sql/portable/idgen_portable.sql) against the extension: the same results
and SQLSTATEs for the deterministic functions over 100,000 random inputs and every boundary; its
generators' uniqueness and order under concurrent clients and a clock stepped back; installed and
used by a role that is not a superuser on a server without idgen; and the switch to the
extension (sql/portable/switch_to_extension.sql) with no id reissued."""

import bisect
import glob
import os
import subprocess
import threading
import time

import psycopg2
import pytest
from conftest import ROOT
from idgen_harness import cluster, tle
from test_upgrade import install_idgen, private_server

PORTABLE = os.path.join(ROOT, "sql", "portable", "idgen_portable.sql")
SWITCH = os.path.join(ROOT, "sql", "portable", "switch_to_extension.sql")
DEFAULT = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
ALPHABET2 = "zyxwvutsrqponmlkjihgfedcbaZYXWVUTSRQPONMLKJIHGFEDCBA9876543210"  # reversed: also 62 distinct
ROWS = 100_000
EPOCH = 1288834974657


def psql(c, path, *variables, db="postgres", user="postgres"):
    cmd = [os.path.join(c.bin_dir, "psql"), "-X", "-q", "-h", c.socket_dir, "-p", str(c.port), "-U", user,
           "-d", db, "-v", "ON_ERROR_STOP=1"]
    for v in variables:
        cmd += ["-v", v]
    return subprocess.run([*cmd, "-f", path], capture_output=True, text=True)


def install(c, *variables, db="postgres", user="postgres"):
    """The portable edition installed with psql's variables (name=value), as c's edition says:
    the psql script, or (c.edition == "pg_tle") the pg_tle extension made from the same source,
    its variables given as idgen_portable_configure() arguments and GRANTs (tle_install)."""
    if getattr(c, "edition", "psql") == "pg_tle":
        done = psql(c, tle_install(c, dict(v.split("=", 1) for v in variables), db), db=db, user=user)
    else:
        done = psql(c, PORTABLE, *variables, db=db, user=user)
    assert done.returncode == 0, done.stderr
    return done


# ---- the pg_tle edition ---------------------------------------------------------------------------

# pg_tle is built on the default and the newest version (pg_test/run, pg_tle): the tests that
# run against both installs run against the pg_tle one there.
TLE_VERSIONS = (15, 18)
EDITIONS = ["psql", "pg_tle"] if cluster.server_major() in TLE_VERSIONS else ["psql"]
TLE_CONF = "shared_preload_libraries = 'pg_tle'"
TLE_CONF_WITH_IDGEN = "shared_preload_libraries = 'idgen,pg_tle'"


def require_pg_tle(c):
    """Fails where pg_test/run should have built pg_tle and did not; skips where no sources are."""
    if not c.one("SELECT count(*) FROM pg_available_extensions WHERE name = 'pg_tle'"):
        # where pg_test/install.sh (ensure_pg_tle) looks for the archive
        places = [os.environ.get("IDGEN_PG_TLE_SOURCES", ""), os.path.join(ROOT, "..", "shared", "vendor", "pg_tle"),
                  "/work/shared/vendor/pg_tle"]
        if any(p and glob.glob(os.path.join(p, "pg_tle-*.tar.gz")) for p in places):
            pytest.fail("pg_tle's sources are here but the server has no pg_tle: run the tests with make test")
        pytest.skip("no pg_tle for this server (no sources in ../shared/vendor/pg_tle)")


def tle_files(tmp):
    """The pg_tle package as `make package` writes it (idgen_harness.tle), in tmp."""
    files = tle.write(str(tmp))
    for f in files:
        os.chmod(f, 0o644)
    os.chmod(str(tmp), 0o755)
    return files


def tle_install(c, variables, db):
    """A psql script that does for the pg_tle edition what the psql edition does with variables:
    pg_tle in the database (by the superuser), the extension stored (once per database) and
    created, configured, and EXECUTE granted. Written next to c's data; returns its path."""
    require_pg_tle(c)
    schema = variables.get("schema")
    c.q("CREATE EXTENSION IF NOT EXISTS pg_tle", db=db)
    folder = os.path.join(c.base_dir, "tle-package")
    if not os.path.exists(folder):
        tle_files(folder)
    calls = {k: variables[k] for k in ("worker_id", "epoch", "layout", "max_clock_wait") if k in variables}
    lines = ["\\set ON_ERROR_STOP on",
             "SELECT NOT EXISTS (SELECT FROM pgtle.available_extensions() WHERE name = 'idgen_portable')"
             " AS fresh \\gset",
             "\\if :fresh", f"\\i {folder}/idgen_portable--{tle.version()}.pgtle.sql", "\\endif",
             "CREATE EXTENSION IF NOT EXISTS idgen_portable" + (f" SCHEMA {schema}" if schema else "") + ";"]
    s = schema or "public"
    if calls:
        args = ", ".join(f"{k} => {int(v)}" if k != "layout" else f"{k} => $l${v}$l$" for k, v in calls.items())
        lines.append(f"SELECT {s}.idgen_portable_configure({args}) \\gset")
    for role in filter(None, (r.strip() for r in variables.get("grant_to", "").split(","))):
        lines.append(f"GRANT EXECUTE ON FUNCTION {s}.snowflake_next() TO "
                     + ("PUBLIC" if role.lower() == "public" else f'"{role}"') + ";")
    path = os.path.join(folder, f"install-{len(os.listdir(folder))}.sql")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.chmod(path, 0o644)
    return path


# ---- parity with the extension ------------------------------------------------------------------


@pytest.fixture(params=EDITIONS)
def both(request):
    """The extension in public and the portable edition in schema portable, in one database:
    the psql script (both_psql), or the pg_tle extension made from it (both_pg_tle). (Two
    module fixtures rather than one with params: a worker given the tests in another order then
    switches between them instead of making either again.)"""
    return request.getfixturevalue(f"both_{request.param}")


@pytest.fixture(scope="module")
def both_psql(module_factory):
    return parity_server(module_factory, "psql")


@pytest.fixture(scope="module")
def both_pg_tle(module_factory):
    return parity_server(module_factory, "pg_tle")


def parity_server(module_factory, edition):
    c = module_factory(f"parity-{edition}", worker_id=1, conf=[TLE_CONF_WITH_IDGEN] if edition == "pg_tle" else [])
    c.edition = edition
    c.q("CREATE DATABASE parity")
    c.q("CREATE EXTENSION idgen", "CREATE SCHEMA portable",
        # the SQLSTATE a statement raises, or 'ok'
        "CREATE FUNCTION sqlstate_of(q text) RETURNS text LANGUAGE plpgsql AS $$"
        " BEGIN EXECUTE q; RETURN 'ok'; EXCEPTION WHEN OTHERS THEN RETURN SQLSTATE; END $$",
        db="parity")
    install(c, "worker_id=1", "schema=portable", db="parity")
    return c


def e_literal(text):
    """text as an E'' literal, every character escaped (control and Unicode blanks included)."""
    return "E'" + "".join(f"\\u{ord(ch):04x}" if ord(ch) < 0x10000 else f"\\U{ord(ch):08x}" for ch in text) + "'"


# Blanks idgen ignores around a layout and its parts (src/core/src/layout.rs, BLANKS), and Unicode
# blanks it does not: the extension and the portable edition must read every one alike.
ASCII_BLANKS = [" ", "\t", "\n", "\r", "\x0b", "\x0c"]
UNICODE_BLANKS = ["\u00a0", "\u0085", "\u1680", "\u2003", "\u2028", "\u3000", "\ufeff"]
LAYOUT_TEXTS = ["twitter", "Instagram", "DISCORD", "sonyflake", "js53", "40/12/11/10ms", "40/12/11", "+40/12/11/10",
                "40/012/11/10", "41/13/10/1ms", "banana", "42/11/12", "40/12/11/10 ms", "40/12/11/7ms", "", "/"]


def layout_spellings():
    out = []
    for text in LAYOUT_TEXTS:
        for b in ASCII_BLANKS + UNICODE_BLANKS:
            out += [b + text, text + b, text.replace("/", b + "/" + b)]
    return sorted(set(out))


def test_the_extension_and_the_portable_edition_read_every_layout_spelling_alike(both):
    """Names and splits with every ASCII blank idgen ignores, and Unicode blanks it does not,
    around the whole and around each part: the extension's decoders and the portable edition's
    take the same ones (with the same fields) and refuse the same ones with 22023."""
    spellings = layout_spellings()
    values = ", ".join(f"({i}, {e_literal(t)})" for i, t in enumerate(spellings))
    rows = both.q(f"""
        SELECT i, ext, por FROM (VALUES {values}) v(i, t), LATERAL (SELECT
          sqlstate_of(format('SELECT snowflake_worker_id(123456789012345, %L)', t)) AS ext_state,
          sqlstate_of(format('SELECT portable.snowflake_worker_id(123456789012345, %L)', t)) AS por_state) s,
          LATERAL (SELECT CASE WHEN ext_state = 'ok' THEN format('%s/%s/%s', snowflake_worker_id(123456789012345, t),
                       snowflake_sequence(123456789012345, t), snowflake_timestamp(123456789012345, 0, t))
                     ELSE ext_state END AS ext,
                  CASE WHEN por_state = 'ok' THEN format('%s/%s/%s', portable.snowflake_worker_id(123456789012345, t),
                       portable.snowflake_sequence(123456789012345, t),
                       portable.snowflake_timestamp(123456789012345, 0, t))
                     ELSE por_state END AS por) d""", db="parity")
    differ = [(spellings[i], ext, por) for i, ext, por in rows if ext != por]
    assert not differ, differ[:10]
    taken = sum(ext not in ("22023",) for _, ext, _ in rows)
    assert len(rows) == len(spellings) and 0 < taken < len(rows), (taken, len(rows))
    # the rule itself: an ASCII blank is ignored, a Unicode one is not
    assert dict((spellings[i], ext) for i, ext, _ in rows)["\u00a0twitter"] == "22023"
    assert dict((spellings[i], ext) for i, ext, _ in rows)["\ttwitter"] != "22023"


# Inputs: 100,000 random rows plus the boundaries, as SQL with a column x (and w, a where used).
NUMBERS = (f"SELECT x FROM (SELECT setseed(0.42)) s, LATERAL (SELECT ((random() * 9223372036854775807)::bigint"
           f" >> (random() * 63)::int) AS x FROM generate_series(1, {ROWS})) g"
           " UNION ALL SELECT unnest(ARRAY[0, 1, 61, 62, 63, 3843, 3844, 9223372036854775807]::bigint[])"
           " UNION ALL SELECT (62::numeric ^ k + d)::bigint FROM generate_series(1, 10) k, unnest(ARRAY[-1, 0, 1]) d")
UUIDS = (f"SELECT x FROM (SELECT setseed(0.43)) s, LATERAL (SELECT CASE WHEN g % 2 = 0 THEN gen_random_uuid()"
         f" ELSE public.uuid_v7() END AS x FROM generate_series(1, {ROWS}) g) g"
         " UNION ALL SELECT unnest(ARRAY['00000000-0000-0000-0000-000000000000',"
         " 'ffffffff-ffff-ffff-ffff-ffffffffffff', '00000000-0000-0000-0000-000000000001']::uuid[])")
TIMES = (f"SELECT x FROM (SELECT setseed(0.44)) s, LATERAL (SELECT 'epoch'::timestamptz + interval '1 microsecond'"
         f" * floor(random() * 1e13 * random()) AS x FROM generate_series(1, {ROWS})) g"
         " UNION ALL SELECT unnest(ARRAY['1970-01-01 00:00:00+00', '1970-01-01 00:00:00.000999+00',"
         " '2010-11-04 01:42:54.657+00', '2010-11-04 01:42:54.656999+00', '2080-07-10 17:30:30.208+00',"
         " '2080-07-10 17:30:30.208999+00', '2026-12-01 12:00:00.123456+00']::timestamptz[])")
V7_TIMES = (f"SELECT x FROM (SELECT setseed(0.45)) s, LATERAL (SELECT 'epoch'::timestamptz + interval '1 microsecond'"
            f" * floor(random() * 2.8e17 * random() ^ 4) AS x FROM generate_series(1, {ROWS})) g"
            " UNION ALL SELECT unnest(ARRAY['1970-01-01 00:00:00+00',"
            " '10889-08-02 05:31:50.655999+00']::timestamptz[])")

LAYOUTS = ["twitter", "instagram", "discord", "sonyflake", "js53", "40/12/11/10ms", " 41 / 5 / 17 "]
LAYOUT_OF_X = f"(ARRAY{LAYOUTS})[1 + (x % {len(LAYOUTS)})::int]"

PARITY = [
    # (name, inputs, expression of x with {s} for the schema)
    ("base62_encode", NUMBERS, "{s}.base62_encode(x)"),
    ("base62_encode width 11", NUMBERS, "{s}.base62_encode(x, 11)"),
    ("base62_encode width 11..64, another alphabet", NUMBERS,
     f"{{s}}.base62_encode(x, 11 + (x % 54)::int, '{ALPHABET2}')"),
    ("base62_decode", NUMBERS, "{s}.base62_decode(public.base62_encode(x, 11 * (x % 2)::int))"),
    ("base62_decode padded, another alphabet", NUMBERS,
     f"{{s}}.base62_decode(public.base62_encode(x, 20, '{ALPHABET2}'), '{ALPHABET2}')"),
    ("uuid_to_base62", UUIDS, "{s}.uuid_to_base62(x)"),
    ("uuid_to_base62, another alphabet", UUIDS, f"{{s}}.uuid_to_base62(x, '{ALPHABET2}')"),
    ("base62_to_uuid", UUIDS, "{s}.base62_to_uuid(public.uuid_to_base62(x))"),
    ("base62_to_uuid unpadded", UUIDS,
     "{s}.base62_to_uuid(coalesce(nullif(ltrim(public.uuid_to_base62(x), '0'), ''), '0'))"),
    ("snowflake_timestamp", NUMBERS, "{s}.snowflake_timestamp(x)"),
    ("snowflake_timestamp at an epoch", NUMBERS, "{s}.snowflake_timestamp(x, (x % 2147483647001))"),
    ("snowflake_worker_id", NUMBERS, "{s}.snowflake_worker_id(x)"),
    ("snowflake_sequence", NUMBERS, "{s}.snowflake_sequence(x)"),
    ("snowflake_from_timestamp at epoch 0", TIMES,
     "CASE WHEN x < 'epoch'::timestamptz + interval '2199023255552 ms' THEN {s}.snowflake_from_timestamp(x, 0) END"),
    ("snowflake_from_timestamp", TIMES,
     "CASE WHEN x >= '2010-11-04 01:42:54.657+00' AND x < '2080-07-10 17:30:30.209+00'"
     " THEN {s}.snowflake_from_timestamp(x) END"),
    # the decoders that take a layout: each named one and two explicit ones, in turn
    ("snowflake_timestamp in a layout", NUMBERS, f"{{s}}.snowflake_timestamp(x, {EPOCH}, {LAYOUT_OF_X})"),
    ("snowflake_worker_id in a layout", NUMBERS, f"{{s}}.snowflake_worker_id(x, {LAYOUT_OF_X})"),
    ("snowflake_sequence in a layout", NUMBERS, f"{{s}}.snowflake_sequence(x, {LAYOUT_OF_X})"),
    ("snowflake_from_timestamp in a layout", TIMES,
     # (from the default epoch to before Instagram's layout runs out, its shortest)
     f"CASE WHEN x >= '2010-11-04 01:42:54.657+00' AND x < '2045-01-01+00'"
     f" THEN {{s}}.snowflake_from_timestamp(x, {EPOCH},"
     f" {LAYOUT_OF_X.replace('x %', '(extract(epoch FROM x) * 1000)::bigint %')}) END"),
    # a layout that outlasts a bigint of ms: every time from its epoch on is inside it
    ("snowflake_from_timestamp in a long-lived layout", TIMES,
     "CASE WHEN x >= 'epoch'::timestamptz THEN {s}.snowflake_from_timestamp(x, 0, '61/1/1/1000ms') END"),
    ("uuid_v7_timestamp", V7_TIMES, "{s}.uuid_v7_timestamp(public.uuid_v7(x))"),
    ("uuid_v7_boundary", V7_TIMES, "{s}.uuid_v7_boundary(x)"),
    ("uuid_v7(ts)'s time", V7_TIMES, "public.uuid_v7_timestamp({s}.uuid_v7(x))"),
]


@pytest.mark.parametrize("name,inputs,expr", PARITY, ids=[p[0] for p in PARITY])
def test_every_deterministic_function_returns_what_the_extension_returns(both, name, inputs, expr):
    ext, port = expr.format(s="public"), expr.format(s="portable")
    total, differ, examples = both.q(
        f"SELECT count(*), count(*) FILTER (WHERE a IS DISTINCT FROM b),"
        f" (array_agg(format('%s: %s vs %s', x, a, b)) FILTER (WHERE a IS DISTINCT FROM b))[1:3]"
        f" FROM (SELECT x, {ext} AS a, {port} AS b FROM ({inputs}) i) r", db="parity")[0]
    assert total >= ROWS and differ == 0, examples


def test_uuid_v7_ts_makes_version_7_with_random_bits(both):
    rows = both.q("SELECT count(DISTINCT u), bool_and(substr(u::text, 15, 1) = '7'),"
                  " bool_and(substr(u::text, 20, 1) IN ('8', '9', 'a', 'b'))"
                  " FROM (SELECT portable.uuid_v7('2026-01-01 00:00:00+00') AS u FROM generate_series(1, 1000)) s",
                  db="parity")
    assert rows == [(1000, True, True)]


BAD = [
    "base62_encode(-1)", "base62_encode(-9223372036854775808)", "base62_encode(1, -1)", "base62_encode(1, 65)",
    "base62_encode(62, 1)", "base62_encode(9223372036854775807, 10)", "base62_encode(-1, 99)",
    "base62_encode(1, 0, 'abc')", f"base62_encode(1, 0, '{DEFAULT[:-1]}é')", f"base62_encode(1, 0, '{DEFAULT[:-1]}0')",
    f"base62_encode(1, 0, '{DEFAULT[:-1]}' || chr(7))", f"base62_encode(-1, 0, '{DEFAULT[:-1]}0')",
    "base62_encode(1, 0, '')", f"base62_encode(1, 0, '{DEFAULT}x')",
    "base62_decode('')", "base62_decode('!')", "base62_decode('abc!')", "base62_decode('é')", "base62_decode(' 1')",
    "base62_decode('AzL8n0Y58m8')", "base62_decode('zzzzzzzzzzz')", "base62_decode('zzzzzzzzzzzz!')",
    "base62_decode(repeat('z', 30) || '!')", "base62_decode('', 'abc')", "base62_decode('1', 'abc')",
    "base62_to_uuid('')", "base62_to_uuid('7n42DGM5Tflk9n8mt7Fhc8')", "base62_to_uuid(repeat('z', 23))",
    "base62_to_uuid('0!')", "uuid_to_base62(gen_random_uuid(), 'x')",
    "snowflake_timestamp(-1)", "snowflake_timestamp(-1, 0)", "snowflake_timestamp(1, -1)",
    "snowflake_timestamp(1, 2147483647001)", "snowflake_timestamp(-1, -1)", "snowflake_worker_id(-1)",
    "snowflake_sequence(-9223372036854775808)",
    "snowflake_from_timestamp('infinity')", "snowflake_from_timestamp('-infinity')",
    "snowflake_from_timestamp('2010-11-04 01:42:54.656+00')", "snowflake_from_timestamp('2080-07-10 17:30:30.209+00')",
    "snowflake_from_timestamp('infinity', -1)", "snowflake_from_timestamp(now(), 2147483647001)",
    "snowflake_from_timestamp('1969-12-31 23:59:59.999+00', 0)",
    # layouts that are not, and what lies outside one
    "snowflake_worker_id(1, 'banana')", "snowflake_sequence(1, '42/11/12')", "snowflake_sequence(1, '41/10')",
    "snowflake_timestamp(1, 0, '30/17/16')", "snowflake_timestamp(1, 0, '41/10/12/7')",
    "snowflake_timestamp(1, 0, '41/0/22')", "snowflake_worker_id(1, '4294967295/1/1')",
    "snowflake_worker_id(1, '41/10/x')", "snowflake_worker_id(1, '99999999999/1/1')",
    "snowflake_from_timestamp(now(), 0, '35/10/12')", "snowflake_worker_id(-1, 'twitter')",
    "snowflake_timestamp(-1, 0, 'js53')", "snowflake_timestamp(1, -1, 'js53')",
    "snowflake_from_timestamp('infinity', 0, 'js53')", "snowflake_from_timestamp('2098-01-01+00', 0, 'js53')",
    "snowflake_from_timestamp('1969-12-31 23:59:59.999+00', 0, 'sonyflake')",
    "snowflake_timestamp(9223372036854775807, 0, '61/1/1/1000ms')",
    "snowflake_from_timestamp('1969-12-31 23:59:59+00', 0, '61/1/1/1000ms')",
    "snowflake_timestamp(9223372036854775807, 2147483647000, '54/4/5/1000ms')",
    "uuid_v7_timestamp(gen_random_uuid())", "uuid_v7_timestamp('00000000-0000-0000-0000-000000000000')",
    "uuid_v7_timestamp('01890a5d-ac96-7000-0000-000000000000')",
    "uuid_v7_boundary('infinity')", "uuid_v7_boundary('1969-12-31 23:59:59.999+00')",
    "uuid_v7_boundary('10889-08-02 05:31:50.656+00')", "uuid_v7('-infinity')", "uuid_v7('1969-12-31 23:59:59.999+00')",
]


@pytest.mark.parametrize("call", BAD)
def test_every_bad_input_raises_the_extensions_sqlstate(both, call):
    codes = [both.one(f"SELECT sqlstate_of($q$SELECT {s}.{call}$q$)", db="parity") for s in ("public", "portable")]
    assert codes[0] != "ok", f"the extension accepts {call}"
    assert codes[1] == codes[0], call


NULLS = ["base62_encode(NULL)", "base62_encode(1, NULL)", "base62_decode(NULL)", "base62_decode('1', NULL)",
         "uuid_to_base62(NULL)", "base62_to_uuid(NULL)", "snowflake_timestamp(NULL)", "snowflake_timestamp(1, NULL)",
         "snowflake_worker_id(NULL)", "snowflake_from_timestamp(NULL)", "uuid_v7_timestamp(NULL)",
         "uuid_v7_boundary(NULL)", "uuid_v7(NULL::timestamptz)", "snowflake_worker_id(1, NULL)",
         "snowflake_timestamp(1, 0, NULL)", "snowflake_from_timestamp(now(), 0, NULL)"]


def test_null_in_null_out(both):
    for call in NULLS:
        assert both.q(f"SELECT public.{call} IS NULL, portable.{call} IS NULL", db="parity") == [(True, True)], call


def labels(c, schema):
    return {r[0]: r[1:] for r in c.q(
        "SELECT proname || '(' || pg_get_function_identity_arguments(oid) || ')', provolatile, proisstrict,"
        " proparallel, pg_get_function_arguments(oid), pg_get_function_result(oid)"
        f" FROM pg_proc WHERE pronamespace = '{schema}'::regnamespace AND proname NOT LIKE 'idgen\\_portable\\_%'"
        " AND proname <> 'sqlstate_of'", db="parity")}


def test_the_same_names_signatures_and_labels(both, pg_major):
    ext, port = labels(both, "public"), labels(both, "portable")
    only_extension = {"base62_encode_keyed(n bigint, width integer, alphabet text)",
                      "base62_decode_keyed(code text, alphabet text)", "idgen_stats()", "idgen_lease_status()",
                      # what Citus nodes ask each other (0.3.0): the extension's (docs/citus.md)
                      "idgen_identity()",
                      "snowflake_convert_column(tbl regclass, col name, drop_sequence boolean)",
                      "uuid_v7_convert_column(tbl regclass, col name)",
                      # moving from another generator (0.3.0): the extension's (docs/layouts.md)
                      "snowflake_raise_floor(after_id bigint)",
                      # short codes across a fleet (0.3.0): the extension's, which takes blocks in
                      # a background worker and flushes the WAL (docs/base62.md)
                      "short_code_next(counter text)", "worker_code_next(counter regclass, width integer)",
                      "idgen_short_code_status()"}
    if pg_major < 18:
        only_extension |= {"uuidv7()", "uuid_extract_timestamp(id uuid)"}
    assert set(ext) - set(port) == only_extension
    assert set(port) <= set(ext)
    differ = {name for name in port if port[name] != ext[name]}
    # the generators: same layout by other means, with the labels those means need
    expected = {"snowflake_next()"} | ({"uuid_v7()"} if pg_major < 18 else set())
    assert differ == expected, {n: (ext[n], port[n]) for n in differ}
    assert port["snowflake_next()"][2] == "u"  # nextval() is parallel unsafe
    if pg_major < 18:
        assert port["uuid_v7()"][2] == "r"  # it keeps its order in a session setting


# ---- the generators, on a server without idgen ------------------------------------------------


@pytest.fixture(params=EDITIONS)
def bare(request):
    """bare_psql or bare_pg_tle, as both is both_psql or both_pg_tle."""
    return request.getfixturevalue(f"bare_{request.param}")


@pytest.fixture(scope="module")
def bare_psql(module_factory, tmp_path_factory):
    return bare_server(module_factory, tmp_path_factory, "psql")


@pytest.fixture(scope="module")
def bare_pg_tle(module_factory, tmp_path_factory):
    return bare_server(module_factory, tmp_path_factory, "pg_tle")


def bare_server(module_factory, tmp_path_factory, edition):
    """A server with no idgen at all (a private copy of the installation without its files),
    a role that may only create in schema keys, and the portable edition installed by it with
    worker id 7: the psql script, or the pg_tle extension (the role then has pgtle_admin)."""
    server = private_server(str(tmp_path_factory.mktemp("bare") / "server"))
    install_idgen(server, [])
    c = module_factory(f"bare-{edition}", preload=False, worker_id=None, bin_dir=server[0], fake_clock=True,
                       conf=[TLE_CONF] if edition == "pg_tle" else [])
    c.edition = edition
    c.q("CREATE ROLE app LOGIN", "CREATE DATABASE app", "GRANT CONNECT ON DATABASE app TO app")
    if c.edition == "pg_tle":  # pgtle_admin is made by CREATE EXTENSION pg_tle
        require_pg_tle(c)
        c.q("CREATE EXTENSION pg_tle", db="app")
        c.q("GRANT pgtle_admin TO app")
    c.q("CREATE SCHEMA keys", "GRANT USAGE, CREATE ON SCHEMA keys TO app",
        "REVOKE CREATE ON SCHEMA public FROM PUBLIC", db="app")
    install(c, "worker_id=7", "schema=keys", db="app", user="app")
    c.q("CREATE TABLE keys.t (ord bigserial, id bigint PRIMARY KEY DEFAULT keys.snowflake_next(),"
        " u uuid UNIQUE DEFAULT keys.uuid_v7(), pid int DEFAULT pg_backend_pid(), phase int)", db="app", user="app")
    return c


def test_installed_by_a_role_that_is_not_a_superuser_on_a_server_without_idgen(bare):
    assert bare.one("SELECT count(*) FROM pg_available_extensions WHERE name = 'idgen'") == 0
    assert bare.one("SELECT rolsuper FROM pg_roles WHERE rolname = 'app'") is False
    assert bare.one("SELECT keys.snowflake_worker_id(keys.snowflake_next())", db="app", user="app") == 7
    # the worker id is fixed in what is installed: no session setting changes it
    assert bare.one("SELECT set_config('idgen_portable.worker_id', '9', false)",
                    "SELECT keys.snowflake_worker_id(keys.snowflake_next())", db="app", user="app") == 7
    # another role may insert without any grant on the generator's state, once it may call
    # snowflake_next() (-v grant_to; a reinstall keeps the state)
    bare.q("CREATE ROLE writer LOGIN", "GRANT CONNECT ON DATABASE app TO writer")
    bare.q("GRANT USAGE ON SCHEMA keys TO writer", db="app")
    assert bare.error("SELECT keys.snowflake_next()", db="app", user="writer").pgcode == "42501"
    high = bare.one("SELECT keys.snowflake_next()", db="app", user="app")
    install(bare, "worker_id=7", "schema=keys", "grant_to=writer", db="app", user="app")
    assert bare.one("SELECT keys.snowflake_next()", db="app", user="writer") > high
    bare.q("GRANT INSERT ON keys.t TO writer", "GRANT USAGE ON SEQUENCE keys.t_ord_seq TO writer", db="app", user="app")
    bare.q("INSERT INTO keys.t (phase) VALUES (0)", db="app", user="writer")


# a test of what only the psql script has (its variables' errors, several schemas in one database)
PSQL_ONLY = pytest.mark.parametrize("bare", ["psql"], indirect=True)


@PSQL_ONLY
def test_without_a_worker_id_snowflake_next_names_the_variable(bare):
    bare.q("CREATE SCHEMA nowid AUTHORIZATION app", db="app")
    install(bare, "schema=nowid", db="app", user="app")
    e = bare.error("SELECT nowid.snowflake_next()", db="app", user="app")
    assert e.pgcode == "55000" and "worker_id" in e.diag.message_hint, e
    done = psql(bare, PORTABLE, "schema=nowid", "worker_id=1024", db="app", user="app")
    assert done.returncode != 0 and "worker_id 1024 is out of range" in done.stderr


@PSQL_ONLY
def test_a_js53_portable_edition_makes_js53_ids_and_never_changes_its_layout_silently(bare):
    bare.q("CREATE SCHEMA js AUTHORIZATION app", db="app")
    install(bare, "schema=js", "worker_id=100", "layout=js53", db="app", user="app")
    ids = [r[0] for r in bare.q("SELECT js.snowflake_next() FROM generate_series(1, 2000)", db="app", user="app")]
    assert ids == sorted(ids) and len(set(ids)) == 2000 and max(ids) < 2**53
    # decoded by the extension's rules, which the parity tests check the portable decoders against
    assert bare.one(f"SELECT bool_and(js.snowflake_worker_id(id, 'js53') = 100)"
                    f" AND max(js.snowflake_sequence(id, 'js53')) <= 255"
                    f" AND bool_and(js.snowflake_timestamp(id) BETWEEN now() - interval '1 min'"
                    f" AND now() + interval '1 min')"
                    f" FROM unnest(ARRAY{ids}::bigint[]) AS id", db="app")
    # 2,000 ids need at least 8 ticks of 256: the sequence carried into the next 10-ms ticks
    assert len({i >> 15 for i in ids}) >= 8
    e = bare.error(f"SELECT js.snowflake_worker_id({ids[0]})", db="app")
    assert e.pgcode == "55000" and "snowflake_worker_id(id, 'js53')" in e.diag.message_hint, e
    assert bare.one("SELECT js.idgen_portable_installed_layout()", db="app") == "js53"
    # another layout over it: refused, nothing changed
    done = psql(bare, PORTABLE, "schema=js", "worker_id=100", db="app", user="app")
    assert done.returncode != 0 and "has the portable edition of layout js53, not twitter" in done.stderr, done.stderr
    assert bare.one("SELECT js.snowflake_next()", db="app", user="app") > max(ids)
    # a worker id its field cannot hold; an explicit layout is written as idgen writes it
    done = psql(bare, PORTABLE, "schema=js", "worker_id=128", "layout=js53", db="app", user="app")
    assert done.returncode != 0 and "worker_id 128 is out of range for layout js53 (0-127)" in done.stderr
    bare.q("CREATE SCHEMA ex AUTHORIZATION app", db="app")
    install(bare, "schema=ex", "worker_id=4000", "layout= 40/12/11/10 ", db="app", user="app")
    assert bare.one("SELECT ex.idgen_portable_installed_layout()", db="app") == "40/12/11/10ms"
    assert bare.one("SELECT ex.snowflake_worker_id(ex.snowflake_next(), '40/12/11/10ms')", db="app", user="app") == 4000


@PSQL_ONLY
def test_an_installer_without_create_or_usage_on_the_schema_is_refused_up_front_and_nothing_is_installed(bare):
    bare.q("CREATE ROLE half LOGIN", "GRANT CONNECT ON DATABASE app TO half")
    for schema, granted, missing in (("only_create", "CREATE", "USAGE"), ("only_usage", "USAGE", "CREATE"),
                                     ("no_grant", None, "CREATE, USAGE")):
        bare.q(f"CREATE SCHEMA {schema}", *([f"GRANT {granted} ON SCHEMA {schema} TO half"] if granted else []),
               db="app")
        done = psql(bare, PORTABLE, "VERBOSITY=verbose", "worker_id=1", f"schema={schema}", db="app", user="half")
        assert done.returncode != 0
        errors = [line for line in done.stderr.splitlines() if "ERROR:" in line]
        refused = (f"ERROR:  42501: idgen portable: half has no {missing.replace(', ', ' or ')} privilege"
                   f" on schema {schema}")
        assert len(errors) == 1 and errors[0].endswith(refused), done.stderr
        assert (f"HINT:  Have the schema's owner (postgres) run: GRANT {missing} ON SCHEMA {schema} TO half; then run"
                " this again. Nothing was installed.") in done.stderr, done.stderr
        assert bare.one(f"SELECT (SELECT count(*) FROM pg_proc WHERE pronamespace = '{schema}'::regnamespace)"
                        f" + (SELECT count(*) FROM pg_class WHERE relnamespace = '{schema}'::regnamespace)",
                        db="app") == 0, "nothing installed"
    # without -v schema: the current schema, here public, where the installer may not create
    done = psql(bare, PORTABLE, "VERBOSITY=verbose", "worker_id=1", db="app", user="half")
    assert "ERROR:  42501: idgen portable: half has no CREATE privilege on schema public" in done.stderr, done.stderr
    assert "run: GRANT CREATE ON SCHEMA public TO half;" in done.stderr
    done = psql(bare, PORTABLE, "VERBOSITY=verbose", "worker_id=1", "schema=nowhere", db="app", user="half")
    assert "ERROR:  3F000: idgen portable: schema nowhere does not exist" in done.stderr, done.stderr
    # with both grants the same role installs
    bare.q("GRANT CREATE ON SCHEMA only_usage TO half", db="app")
    install(bare, "worker_id=1", "schema=only_usage", db="app", user="half")
    assert bare.one("SELECT only_usage.snowflake_worker_id(only_usage.snowflake_next())", db="app", user="half") == 1


@PSQL_ONLY
def test_grant_to_roles_without_usage_on_the_schema_get_a_notice_naming_the_grant_its_owner_must_run(bare):
    bare.q("CREATE ROLE reader LOGIN", "GRANT CONNECT ON DATABASE app TO reader")
    bare.q("CREATE SCHEMA noticed AUTHORIZATION app", db="app")
    done = install(bare, "worker_id=2", "schema=noticed", "grant_to=reader,app", db="app", user="app")
    notices = [line for line in done.stderr.splitlines() if "USAGE" in line]
    assert len(notices) == 2, done.stderr
    assert notices[1] == "HINT:  Have the schema's owner (app) run: GRANT USAGE ON SCHEMA noticed TO reader;"
    assert notices[0].endswith("NOTICE:  idgen portable: reader has no USAGE on schema noticed, so its calls of"
                               " noticed.snowflake_next() fail (42501)"), notices
    # what the NOTICE says: the call fails until the schema's owner grants USAGE
    assert bare.error("SELECT noticed.snowflake_next()", db="app", user="reader").pgcode == "42501"
    bare.q("GRANT USAGE ON SCHEMA noticed TO reader", db="app", user="app")
    assert bare.one("SELECT noticed.snowflake_worker_id(noticed.snowflake_next())", db="app", user="reader") == 2
    done = install(bare, "worker_id=2", "schema=noticed", "grant_to=reader,app", db="app", user="app")
    assert "USAGE" not in done.stderr, done.stderr


def assert_increasing(c, where="true"):
    """Every row unique; within each session (pid), ids and UUIDs strictly increase in insertion order."""
    assert c.q(f"SELECT count(*) = count(DISTINCT id) AND count(*) = count(DISTINCT u) FROM keys.t WHERE {where}",
               db="app") == [(True,)]
    bad = c.one("SELECT count(*) FROM (SELECT id, u, lag(id) OVER w AS pid_, lag(u) OVER w AS pu FROM keys.t"
                f" WHERE {where} WINDOW w AS (PARTITION BY pid ORDER BY ord)) s WHERE id <= pid_ OR u <= pu", db="app")
    assert bad == 0


def test_concurrent_clients_never_share_an_id(bare, tmp_path):
    script = tmp_path / "insert.sql"
    script.write_text("INSERT INTO keys.t (phase) VALUES (1);\n")
    bare.pgbench("-n", "-c", "4", "-j", "2", "-t", "2500", "-f", str(script), "-U", "app", db="app")
    assert bare.one("SELECT count(*) FROM keys.t WHERE phase = 1", db="app") == 10000
    assert_increasing(bare)
    assert bare.one("SELECT count(DISTINCT pid) FROM keys.t WHERE phase = 1", db="app") == 4
    assert bare.one("SELECT bool_and(keys.snowflake_worker_id(id) = 7) FROM keys.t", db="app") is True


def test_the_clock_stepped_back_restarts_and_crashes(bare):
    """As the extension's: a clock within max_clock_wait (1 s) behind the last id is waited for,
    further behind it is refused with 58000, and refused calls spend no value of the state
    (else a loop of them would push it ever further ahead of the clock). The state survives a
    restart and a crash with the clock still behind."""
    high = bare.one("SELECT max(id) FROM keys.t", db="app")
    bare.clock.set("-0.5s")
    bare.q("INSERT INTO keys.t (phase) SELECT 2 FROM generate_series(1, 2000)", db="app", user="app")
    assert bare.one(f"SELECT min(id) > {high} FROM keys.t WHERE phase = 2", db="app") is True
    high = bare.one("SELECT max(id) FROM keys.t", db="app")
    bare.clock.set("-5s")
    e = bare.error("INSERT INTO keys.t (phase) SELECT 3 FROM generate_series(1, 10)", db="app", user="app")
    assert e.pgcode == "58000" and "ms behind the last snowflake id issued, longer than max_clock_wait (1000 ms)" \
        in e.diag.message_primary, e
    assert "Ids resume once the clock reaches" in e.diag.message_detail and "max_clock_wait" in e.diag.message_hint
    state = "SELECT last_value FROM keys.idgen_portable_snowflake_state"
    before = bare.one(state, db="app")
    bare.q("DO $$ DECLARE n int := 0; BEGIN FOR i IN 1..1000 LOOP"
           " BEGIN PERFORM keys.snowflake_next(); EXCEPTION WHEN SQLSTATE '58000' THEN n := n + 1; END;"
           " END LOOP; IF n <> 1000 THEN RAISE EXCEPTION 'only % of 1000 refused', n; END IF; END $$",
           db="app", user="app")
    assert bare.one(state, db="app") == before  # 1,000 refusals, no value spent
    assert bare.one("SELECT pg_sequence_last_value('keys.idgen_portable_snowflake_seqlock') % 2", db="app") == 1
    # a restart and a crash with the clock still behind: the state sequence survives both
    bare.stop().start()
    assert bare.error("SELECT keys.snowflake_next()", db="app", user="app").pgcode == "58000"
    victim = bare.connect("app")
    bare.kill_backend(victim.get_backend_pid())
    bare.wait_for_connections()
    assert bare.error("SELECT keys.snowflake_next()", db="app", user="app").pgcode == "58000"
    bare.clock.set("+0")
    bare.q("INSERT INTO keys.t (phase) SELECT 4 FROM generate_series(1, 100)", db="app", user="app")
    assert bare.one(f"SELECT count(*) FROM keys.t WHERE phase = 4 AND id <= {high}", db="app") == 0
    # the clock caught up: the seqlock is even again, and the fast path back
    assert bare.one("SELECT pg_sequence_last_value('keys.idgen_portable_snowflake_seqlock') % 2", db="app") == 0
    assert bare.one("SELECT count(*) FROM (SELECT id, lag(id) OVER (ORDER BY ord) AS p FROM keys.t"
                    " WHERE phase >= 2) s WHERE id <= p", db="app") == 0


def test_many_writers_clock_steps_and_a_burst_past_the_cap_never_repeat_an_id(bare):
    """Six writers, three under Twitter's layout and three under js53's (256 ids per 10-ms tick:
    they ask for more, so ids carry into later ticks and wait for them), while the server's
    clock steps half a second back (waited for), forward again, three seconds back (refused:
    58000) and forward again; libfaketime moves each backend's clock at its own moment within 2 s,
    so backends disagree about the time meanwhile. Every id is collected: none twice, each of the
    worker's field, each statement's increasing, every statement's ids above those of every
    statement that ended before it began (in any backend), and none from a tick the backend's
    clock had not reached when the statement ended."""
    # the pg_tle edition is one extension per database: its js53 generator in a database of its own
    dbs = {"keys": "app", "burst": "app" if bare.edition == "psql" else "burst"}
    if dbs["burst"] != "app":
        bare.q("CREATE DATABASE burst OWNER app")
    bare.q("CREATE SCHEMA burst AUTHORIZATION app", db=dbs["burst"])
    install(bare, "schema=burst", "worker_id=7", "layout=js53", db=dbs["burst"], user="app")
    layouts = {"keys": ("twitter", 22, 12, 1023, 1), "burst": ("js53", 15, 8, 127, 10)}  # shifts, masks, ms
    stop = threading.Event()
    statements = {schema: [] for schema in layouts}  # (start, end, ids, clock at the end in ms)
    refusals, failures = [], []

    def writer(schema):
        conn = bare.connect(dbs[schema], user="app")
        conn.autocommit = True
        try:
            with conn.cursor() as cur:
                while not stop.is_set():
                    start = time.monotonic()
                    try:
                        cur.execute(f"SELECT array_agg({schema}.snowflake_next() ORDER BY g),"
                                    " (extract(epoch FROM clock_timestamp()) * 1000)::bigint"
                                    " FROM generate_series(1, 100) g")
                    except psycopg2.Error as e:
                        (refusals if e.pgcode == "58000" else failures).append((schema, e.pgcode, str(e)))
                        continue
                    got, clock_ms = cur.fetchone()
                    statements[schema].append((start, time.monotonic(), got, clock_ms))
        finally:
            conn.close()

    threads = [threading.Thread(target=writer, args=(s,)) for s in layouts for _ in range(3)]
    for t in threads:
        t.start()
    back = []  # while a backend's clock may step back: its clock at a statement's end may be behind
    try:
        for offset in ("+0", "-0.5s", "+0", "-3s", "+0"):
            began = time.monotonic()
            bare.clock.set(offset)  # waits until every backend has it (2.1 s)
            if offset != "+0":
                back.append((began, time.monotonic()))
            time.sleep(0.5)
    finally:
        stop.set()
        for t in threads:
            t.join(60)
        bare.clock.set("+0")
    assert not failures, failures[:3]
    assert refusals and all("longer than max_clock_wait" in r[2] for r in refusals), refusals[:3]
    for schema, (layout, time_shift, worker_shift, worker_mask, unit_ms) in layouts.items():
        done = statements[schema]
        ids = [i for _, _, got, _ in done for i in got]
        assert len(ids) > 3000, (schema, len(ids))
        assert len(set(ids)) == len(ids), f"{schema}: {len(ids) - len(set(ids))} ids issued twice"
        assert all((i >> worker_shift) & worker_mask == 7 for i in ids), layout
        for _, _, got, _ in done:
            assert got == sorted(got) and len(set(got)) == len(got), got
        # order across backends in real time: prefix maximum of the statements ordered by end
        by_end = sorted(done, key=lambda s: s[1])
        ends = [s[1] for s in by_end]
        prefix, top = [], -1
        for s in by_end:
            top = max(top, s[2][-1])
            prefix.append(top)
        for start, _, got, _ in done:
            k = bisect.bisect_left(ends, start)
            assert k == 0 or prefix[k - 1] < got[0], (schema, "an id below one a finished statement returned")
        # no id ahead of its backend's clock: ids waited for their tick
        ahead = [(got[-1], clock) for start, end, got, clock in done
                 if (got[-1] >> time_shift) * unit_ms + EPOCH > clock
                 and not any(start < b and end > a for a, b in back)]
        assert not ahead, (schema, len(ahead), ahead[:3])
    # the js53 writers asked for more than a tick holds: full ticks of 256 and later ones waited for
    per_tick = {}
    for _, _, got, _ in statements["burst"]:
        for i in got:
            per_tick[i >> 15] = per_tick.get(i >> 15, 0) + 1
    assert max(per_tick.values()) == 256, max(per_tick.values())


def test_a_cancel_while_holding_the_lock_does_not_leave_it_held(bare):
    """The generator's advisory lock is the session's for microseconds: a statement cancelled
    in the middle of many calls does not keep it. (pg_cancel_backend rather than
    statement_timeout: the timeout's signal handler reads the clock, which libfaketime then
    serves with a malloc inside the handler.)"""
    victim = bare.connect("app", user="app")
    pid = victim.get_backend_pid()
    result = {}

    def run():
        try:
            with victim.cursor() as cur:
                cur.execute("SELECT count(keys.snowflake_next()) FROM generate_series(1, 100000000)")
        except psycopg2.Error as e:
            result["error"] = e

    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.5)
    bare.q(f"SELECT pg_cancel_backend({pid})")
    t.join(60)
    assert result["error"].pgcode == "57014"
    assert bare.one(f"SELECT count(*) FROM pg_locks WHERE (locktype = 'advisory'"
                    f" OR relation = 'keys.idgen_portable_snowflake_jump_lock'::regclass) AND pid = {pid}",
                    db="app") == 0
    other = bare.connect("app", user="app")
    with other.cursor() as cur:
        cur.execute("SET lock_timeout = '2s'")
        cur.execute("SELECT keys.snowflake_next()")
    other.close()
    victim.close()


# ---- the switch to the extension ---------------------------------------------------------------


@pytest.mark.parametrize("edition", EDITIONS)
def test_moving_to_the_extension_reissues_nothing_and_rewrites_no_default_by_hand(cluster_factory, edition):
    c = cluster_factory("switch", worker_id=3, fake_clock=True,
                        conf=[TLE_CONF_WITH_IDGEN] if edition == "pg_tle" else [])
    c.edition = edition
    c.q("CREATE DATABASE app")
    install(c, "worker_id=3", db="app")
    c.q("CREATE SEQUENCE code_seq",
        "CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT snowflake_next(), ref uuid UNIQUE DEFAULT uuid_v7(),"
        " code text UNIQUE DEFAULT base62_encode(nextval('code_seq'), 6),"
        f" made timestamptz GENERATED ALWAYS AS (snowflake_timestamp(id, {EPOCH})) STORED, n int)",
        "CREATE INDEX orders_worker ON orders (snowflake_worker_id(id))",
        "CREATE VIEW links AS SELECT id, uuid_to_base62(ref) AS link FROM orders",
        "CREATE TABLE events (id bigint PRIMARY KEY DEFAULT snowflake_next(), n int)",
        "INSERT INTO orders (n) SELECT g FROM generate_series(1, 500) g",
        "INSERT INTO events (n) SELECT g FROM generate_series(1, 500) g", db="app")
    high_id, high_ref = c.q("SELECT max(id), max(ref::text) FROM orders", db="app")[0]
    high_event = c.one("SELECT max(id) FROM events", db="app")
    before = c.q("SELECT n, id, ref, code, made FROM orders ORDER BY n", db="app")

    # a clock too far behind the portable edition's last id: refused, nothing changed
    c.clock.set("-30s")
    done = psql(c, SWITCH, db="app")
    assert done.returncode != 0 and "behind the last id" in done.stderr, done.stderr
    assert c.one("SELECT count(*) FROM pg_extension WHERE extname = 'idgen'", db="app") == 0
    assert c.one("SELECT to_regprocedure('public.idgen_portable_settings()') IS NOT NULL", db="app")
    if edition == "pg_tle":  # still the extension's members
        assert c.one("SELECT count(*) FROM pg_depend WHERE deptype = 'e' AND refobjid ="
                     " (SELECT oid FROM pg_extension WHERE extname = 'idgen_portable')", db="app") > 30

    # a few seconds behind (8 s, less the time set() waits for the clock to settle): it waits,
    # then switches
    c.clock.set("-8s")
    done = psql(c, SWITCH, db="app")
    assert done.returncode == 0, done.stderr
    assert c.one("SELECT extversion FROM pg_extension WHERE extname = 'idgen'", db="app") is not None
    assert c.one("SELECT count(*) FROM pg_extension WHERE extname = 'idgen_portable'", db="app") == 0
    # every DEFAULT now calls the extension's C functions
    languages = c.q("SELECT DISTINCT l.lanname FROM pg_attrdef d"
                    " JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum AND a.attgenerated = ''"
                    " JOIN pg_depend dep ON dep.classid = 'pg_attrdef'::regclass AND dep.objid = d.oid"
                    " AND dep.refclassid = 'pg_proc'::regclass JOIN pg_proc p ON p.oid = dep.refobjid"
                    " JOIN pg_language l ON l.oid = p.prolang", db="app")
    assert languages == [("c",)], languages
    exprs = c.q("SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef WHERE adrelid = 'orders'::regclass ORDER BY adnum",
                db="app")
    assert exprs[:3] == [("snowflake_next()",), ("uuid_v7()",), ("base62_encode(nextval('code_seq'::regclass), 6)",)]

    c.q("INSERT INTO orders (n) SELECT g FROM generate_series(501, 1000) g",
        "INSERT INTO events (n) SELECT g FROM generate_series(501, 1000) g", db="app")
    assert c.one(f"SELECT count(*) FROM orders WHERE n > 500 AND (id <= {high_id} OR ref::text <= '{high_ref}')",
                 db="app") == 0
    assert c.one(f"SELECT count(*) FROM events WHERE n > 500 AND id <= {high_event}", db="app") == 0
    assert c.one("SELECT bool_and(snowflake_worker_id(id) = 3) FROM orders", db="app") is True
    assert c.q("SELECT n, id, ref, code, made FROM orders WHERE n <= 500 ORDER BY n", db="app") == before
    assert c.one(f"SELECT count(*) FROM orders WHERE made <> snowflake_timestamp(id, {EPOCH})", db="app") == 0
    assert c.one("SELECT count(*) FROM links WHERE base62_to_uuid(link) IS NULL", db="app") == 0
    # the index, generated column and view still call the retired copies, which stay for them
    assert c.one("SELECT count(*) FROM pg_proc WHERE pronamespace = 'idgen_portable_retired'::regnamespace"
                 " AND proname = 'snowflake_worker_id' AND pronargs = 1", db="app") == 1
    try:
        c.q("DROP SCHEMA idgen_portable_retired", db="app")
        raise AssertionError("the retired schema could be dropped while an index uses it")
    except psycopg2.Error as e:
        assert e.pgcode == "2BP01"


def test_the_switch_refuses_without_the_extension(cluster_factory):
    c = cluster_factory("no-extension", preload=False, worker_id=None)
    install(c, "worker_id=1")
    done = psql(c, SWITCH)
    assert done.returncode != 0 and "not preloaded" in done.stderr, done.stderr
    assert c.one("SELECT to_regprocedure('public.idgen_portable_settings()') IS NOT NULL")


def test_the_switch_takes_the_layout_along_and_refuses_another(cluster_factory):
    """A js53 portable edition moves to a js53 server: new ids above the old, still below 2^53.
    Onto a server of another layout it refuses, naming both, and changes nothing."""
    # the server's setting spelled otherwise than the portable edition's canonical 'js53'
    c = cluster_factory("js53-switch", worker_id=5, conf=["idgen.layout = ' 38/7/8/10 '"])
    c.q("CREATE DATABASE app")
    install(c, "worker_id=5", "layout=js53", db="app")
    c.q("CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_next(), n int)",
        "INSERT INTO t (n) SELECT g FROM generate_series(1, 3000) g", db="app")
    high = c.one("SELECT max(id) FROM t", db="app")
    done = psql(c, SWITCH, db="app")
    assert done.returncode == 0, done.stderr
    c.q("INSERT INTO t (n) SELECT g FROM generate_series(3001, 6000) g", db="app")
    assert c.one(f"SELECT min(id) FILTER (WHERE n > 3000) > {high} AND max(id) < 2^53"
                 " AND count(DISTINCT id) = 6000 FROM t", db="app")
    assert c.one("SELECT bool_and(snowflake_worker_id(id, 'js53') = 5) FROM t", db="app")

    other = cluster_factory("twitter-switch", worker_id=5)
    other.q("CREATE DATABASE app")
    install(other, "worker_id=5", "layout=js53", db="app")
    done = psql(other, SWITCH, db="app")
    assert done.returncode != 0 and ("idgen.layout is twitter, the portable edition was installed with layout js53"
                                     in done.stderr), done.stderr
    assert other.one("SELECT count(*) FROM pg_extension WHERE extname = 'idgen'", db="app") == 0
    assert other.one("SELECT snowflake_worker_id(snowflake_next(), 'js53')", db="app") == 5
