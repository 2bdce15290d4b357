-- key: uuid
-- expr: gen_random_uuid()
-- made by: core's `gen_random_uuid()`
-- Random UUIDs: every insert lands on a random leaf.
INSERT INTO idgen_study (id, payload) SELECT gen_random_uuid(), 'payload-0123456789' FROM generate_series(1, :batch);
