-- key: uuid
-- expr: pg_catalog.uuidv7()
-- requires: pg_catalog.uuidv7()
-- made by: core's `uuidv7()` (PostgreSQL 18)
-- PostgreSQL 18's own time-ordered UUIDs (ordered within each backend), where the server has them.
INSERT INTO idgen_study (id, payload) SELECT pg_catalog.uuidv7(), 'payload-0123456789' FROM generate_series(1, :batch);
