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
-- so everyone may. Setting it takes UPDATE on it (mailroom's roles; the application's role
-- needs none on any sequence). Its increment is the largest there is, so nextval, which USAGE
-- allows, can only ever reach 0 and the maximum, never a transaction's id.
--
-- The new bodies are in migrations/functions/, applied after this migration.

CREATE SEQUENCE mailroom_collection_xact MINVALUE 0 START WITH 0
    INCREMENT BY 9223372036854775807;
GRANT SELECT ON SEQUENCE mailroom_collection_xact TO PUBLIC;
