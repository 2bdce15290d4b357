"""A Citus cluster on loopback for idgen's tests and benchmarks: a coordinator and workers, each
a throwaway server (cluster.Cluster) with `shared_preload_libraries = 'citus,idgen'` (Citus first,
as it requires) and a worker id of its own, joined with citus_add_node().

Citus is built from source by pg_test/install.sh (ensure_citus) once per machine, for 15 and 18;
`citus_missing()` says why a test must skip where it is not installed.
"""

import os

from idgen_harness import cluster

# Loopback tests: no TLS between the nodes (Citus would otherwise make itself a certificate and
# require it). Few shards, so that a 2-core machine runs every statement quickly.
CITUS_CONF = ["citus.node_conninfo = 'sslmode=disable'", "max_connections = 60",
              "citus.shard_count = 4", "max_worker_processes = 16"]


def citus_missing():
    """Why Citus cannot run on the server in cluster.pg_bin(), or None when it can."""
    lib = cluster.pg_config("--pkglibdir")
    if os.path.exists(os.path.join(lib, "citus.so")):
        return None
    return (f"Citus is not installed in {lib}: pg_test/install.sh builds it (ensure_citus) from "
            "citus-VERSION.tar.gz in $IDGEN_CITUS_SOURCES or ../shared/vendor/citus, and found none")


class CitusCluster:
    """A coordinator (nodes[0]) and `workers` worker nodes, made by factory (conftest's
    cluster_factory or module_factory), named prefix-coord, prefix-w1, .... worker_ids: one
    idgen.worker_id per node, coordinator first; conf: lines every node's configuration adds
    (after the Citus ones); node_conf(i): lines for node i alone, or None."""

    def __init__(self, factory, prefix, worker_ids=(1, 2, 3), conf=(), node_conf=None):
        self.nodes = []
        for i, wid in enumerate(worker_ids):
            name = f"{prefix}-coord" if i == 0 else f"{prefix}-w{i}"
            extra = (node_conf(i) if node_conf else None) or []
            self.nodes.append(factory(name, worker_id=wid, start=False, conf=[
                "shared_preload_libraries = 'citus,idgen'", f"cluster_name = '{name}'", *CITUS_CONF,
                *conf, *extra]))

    @property
    def coordinator(self):
        return self.nodes[0]

    @property
    def workers(self):
        return self.nodes[1:]

    def start(self, extension=True):
        """Starts every node not yet running, creates Citus on each, joins the workers; with
        extension, CREATE EXTENSION idgen on the coordinator (Citus creates it on the workers)."""
        for n in self.nodes:
            if not n.running():
                n.start()
            n.q("CREATE EXTENSION citus")
        c = self.coordinator
        c.q(f"SELECT citus_set_coordinator_host('127.0.0.1', {c.port})")
        for w in self.workers:
            c.q(f"SELECT citus_add_node('127.0.0.1', {w.port})")
        if extension:
            c.q("CREATE EXTENSION idgen")
        return self

    def node_of_port(self, port):
        return next(n for n in self.nodes if n.port == port)

    def per_node(self, sql):
        """sql's one value on each node, in node order (coordinator first), asked of each node."""
        return [n.one(sql) for n in self.nodes]
