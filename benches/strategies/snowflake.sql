-- key: bigint
-- expr: snowflake_next()
-- made by: idgen's `snowflake_next()` (the extension, the server's `idgen.layout`)
-- idgen's 64-bit snowflake ids.
INSERT INTO idgen_study (id, payload) SELECT snowflake_next(), 'payload-0123456789' FROM generate_series(1, :batch);
