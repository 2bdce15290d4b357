"""The server every client test talks to: idgen preloaded with the test's own worker id (so its
keys are told apart from any other's), and a database `shop` with the extension."""


def shop_server(module_factory, name, worker_id):
    c = module_factory(name, worker_id=worker_id)
    c.q("CREATE DATABASE shop")
    c.q("CREATE EXTENSION idgen", db="shop")
    return c
