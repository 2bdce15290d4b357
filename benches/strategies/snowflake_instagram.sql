-- key: bigint
-- portable: instagram
-- expr: idgen_study_instagram.snowflake_next()
-- made by: the plain-SQL (PL/pgSQL) edition under layout instagram
-- Snowflake ids of Instagram's layout (41 bits of ms, 13 of shard, 10 of sequence), from idgen's portable edition installed for that layout (PL/pgSQL: its rows/s are the portable edition's, not the extension's).
INSERT INTO idgen_study (id, payload) SELECT idgen_study_instagram.snowflake_next(), 'payload-0123456789' FROM generate_series(1, :batch);
