-- key: bigint
-- portable: js53
-- expr: idgen_study_js53.snowflake_next()
-- made by: the plain-SQL (PL/pgSQL) edition under layout js53
-- Snowflake ids of the js53 layout (every id below 2^53: 38 bits of 10-ms ticks, 7 of worker, 8 of sequence), from idgen's portable edition installed for that layout (PL/pgSQL: its rows/s are the portable edition's).
INSERT INTO idgen_study (id, payload) SELECT idgen_study_js53.snowflake_next(), 'payload-0123456789' FROM generate_series(1, :batch);
