"""The Python code that idgen's tests (pg_test/) and benchmarks (benches/) share, as one package.

- cluster: throwaway PostgreSQL servers on testgres, and their command line (`make run`'s cluster);
- waiting: the one wait for a condition (wait_until) and the one runner of threads (run_threads);
- report, nbtree_model: the study's CSV, report and charts, and its model of nbtree's splits;
- chaos, history_check: the fault schedule and the checker of the histories it records.

Both sides import it as `from idgen_harness import cluster`; neither imports the other's files.
The test harness's virtual environment has it installed (editable, from benches/pyproject.toml,
by pg_test/install.sh), and the scripts in benches/ find it beside them, under the system's
python3 too (docs/development.md says why it lives here).
"""
