-- How long snowflake_convert_column() and uuid_v7_convert_column() hold their tables, at
-- :rows rows (default 1,000,000). Each call holds ACCESS EXCLUSIVE on the table (and on the
-- tables whose columns it widens) from its start to its commit, so its time is the time that
-- writers and readers of those tables wait. Run against a database with idgen:
--   psql -X -v rows=1000000 -f benches/convert.sql
\set ON_ERROR_STOP on
\if :{?rows}
\else
  \set rows 1000000
\endif
SET client_min_messages = warning;
DROP TABLE IF EXISTS cv_orders, cv_customers, cv_events, cv_docs;
CREATE TABLE cv_customers (id serial PRIMARY KEY, name text);
CREATE TABLE cv_orders (id bigserial PRIMARY KEY, customer_id integer NOT NULL REFERENCES cv_customers);
CREATE TABLE cv_events (id bigserial PRIMARY KEY, v int);
CREATE TABLE cv_docs (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), v int);
INSERT INTO cv_customers (name) SELECT 'c' || g FROM generate_series(1, :rows) g;
INSERT INTO cv_orders (customer_id) SELECT g FROM generate_series(1, :rows) g;
INSERT INTO cv_events (v) SELECT g FROM generate_series(1, :rows) g;
INSERT INTO cv_docs (v) SELECT g FROM generate_series(1, :rows) g;
VACUUM ANALYZE cv_customers, cv_orders, cv_events, cv_docs;
SELECT current_setting('server_version') AS server, :rows AS rows_per_table,
       pg_size_pretty(pg_total_relation_size('cv_customers') + pg_total_relation_size('cv_orders')) AS rewritten;
\timing on
\echo integer serial key, with an integer foreign key column in a second table (both rewritten):
SELECT snowflake_convert_column('cv_customers');
\echo bigserial key (no rewrite: the DEFAULT only):
SELECT snowflake_convert_column('cv_events', drop_sequence => true);
\echo uuid v4 key to uuid_v7() (the DEFAULT only):
SELECT uuid_v7_convert_column('cv_docs');
\timing off
DROP TABLE cv_orders, cv_customers, cv_events, cv_docs;
