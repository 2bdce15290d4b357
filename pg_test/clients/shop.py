"""The server every client test talks to: idgen preloaded with the test's own worker id (so its
keys are told apart from any other's), and databases without the extension, which each client
makes as docs/clients.md shows (CREATE EXTENSION IF NOT EXISTS idgen, in its own idiom)."""

PAGE = 100  # the page size of the clients' paging by key


def shop_server(module_factory, name, worker_id, databases=("shop",)):
    c = module_factory(name, worker_id=worker_id)
    for db in databases:
        c.q(f"CREATE DATABASE {db}")
        assert c.one("SELECT count(*) FROM pg_extension WHERE extname = 'idgen'", db=db) == 0
    return c


def made_the_extension(c, db="shop"):
    """Whether the client made the extension in `db` (it was not there before)."""
    return c.one("SELECT count(*) FROM pg_extension WHERE extname = 'idgen'", db=db) == 1


def check_keys_and_pages(c, db, worker_id, one, many, pages):
    """What a stack read back is what the table holds: ONE (the key of one insert) and MANY (of an
    insert of 1,000 rows), exact, in the order they were made, each with the server's worker id;
    and PAGES, latest first by key, PAGE rows at a time, reach every row once, in order."""
    assert made_the_extension(c, db), "the stack made the extension before the table"
    got = [int(one), *(int(i) for i in many)]
    table = [int(i) for (i,) in c.q("SELECT id::text FROM orders ORDER BY id", db=db)]
    assert len(many) == 1000 and got == table, "every key read back exactly as the table holds it"
    assert all((i >> 12) & 1023 == worker_id for i in got)
    assert [len(p) for p in pages] == [PAGE] * 10 + [1], [len(p) for p in pages]
    assert [int(i) for p in pages for i in p] == table[::-1], "the pages hold every row once, latest first"
