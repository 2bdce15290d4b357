-- key: text
-- sequence: CACHE 1
-- expr: base62_encode(nextval('idgen_study_seq'))
-- made by: idgen's `base62_encode(nextval())`, the database's collation
-- The same codes unpadded, under the database's default collation: what goes wrong.
INSERT INTO idgen_study (id, payload) SELECT base62_encode(nextval('idgen_study_seq')), 'payload-0123456789' FROM generate_series(1, :batch);
