-- key: uuid
-- expr: uuid_v7()
-- made by: idgen's `uuid_v7()`
-- idgen's time-ordered UUIDs, ordered across backends.
INSERT INTO idgen_study (id, payload) SELECT uuid_v7(), 'payload-0123456789' FROM generate_series(1, :batch);
