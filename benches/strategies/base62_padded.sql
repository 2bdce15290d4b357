-- key: text COLLATE "C"
-- sequence: CACHE 1
-- expr: base62_encode(nextval('idgen_study_seq'), 11)
-- made by: idgen's `base62_encode(nextval(), 11)`, `COLLATE "C"`
-- Short codes from a sequence, fixed width (11 covers every bigint), compared byte by byte.
INSERT INTO idgen_study (id, payload) SELECT base62_encode(nextval('idgen_study_seq'), 11), 'payload-0123456789' FROM generate_series(1, :batch);
