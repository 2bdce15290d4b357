"""The server every client test talks to: idgen preloaded with the test's own worker id (so its
keys are told apart from any other's), and a database `shop` without the extension, which each
client makes as docs/clients.md shows (CREATE EXTENSION IF NOT EXISTS idgen, in its own idiom)."""


def shop_server(module_factory, name, worker_id):
    c = module_factory(name, worker_id=worker_id)
    c.q("CREATE DATABASE shop")
    assert c.one("SELECT count(*) FROM pg_extension WHERE extname = 'idgen'", db="shop") == 0
    return c


def made_the_extension(c):
    """Whether the client made the extension in `shop` (it was not there before)."""
    return c.one("SELECT count(*) FROM pg_extension WHERE extname = 'idgen'", db="shop") == 1
