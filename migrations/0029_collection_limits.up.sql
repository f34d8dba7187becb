-- The collector decides the abuse limits of the signups it collects for its whole batch at once.
--
-- Before: each activation token that mailroom_collect_signups inserted ran the limits trigger
-- (before_token_insert_limits), about 65 us of the collector's 100 us of PostgreSQL CPU per
-- token: the settings read, the account's count and the address counter's upsert as separate
-- statements, row by row.
--
-- Now that function counts the accounts' requests in one query and the addresses' in one upsert
-- (mailroom_address_limit takes arrays), and inserts the tokens already decided. The limits
-- trigger skips them: its WHEN compares the inserting transaction's id with this sequence, which
-- the collecting transaction sets to its own id for its INSERT (collections take turns on the
-- settings' row). Reading it is harmless and the trigger's WHEN reads it as the inserting role,
-- so everyone may; only its owner may set it. Its increment is the largest there is, so nextval
-- (a role with USAGE on every sequence) can only ever reach 0 and the maximum, never a
-- transaction's id; the grants that default privileges gave at its creation are revoked.
--
-- The new bodies are in migrations/functions/, applied after this migration.

CREATE SEQUENCE mailroom_collection_xact MINVALUE 0 START WITH 0
    INCREMENT BY 9223372036854775807;
DO $$
DECLARE
    r RECORD;
BEGIN
    FOR r IN SELECT DISTINCT a.grantee FROM pg_class c CROSS JOIN LATERAL aclexplode(c.relacl) a
              WHERE c.oid = 'mailroom_collection_xact'::regclass AND a.grantee <> c.relowner LOOP
        IF r.grantee = 0 THEN
            REVOKE ALL ON SEQUENCE mailroom_collection_xact FROM PUBLIC;
        ELSE
            EXECUTE format('REVOKE ALL ON SEQUENCE mailroom_collection_xact FROM %s',
                           r.grantee::regrole);
        END IF;
    END LOOP;
END;
$$;
GRANT SELECT ON SEQUENCE mailroom_collection_xact TO PUBLIC;
