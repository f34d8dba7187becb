-- A signup queues its activation request; the collector creates the token.
--
-- Before: the account's BEFORE INSERT trigger created the activation token inside the
-- application's transaction: the token row and its five index entries, the per-address counter's
-- upsert and the deferred foreign key's check at commit, about 150 us of the signup's CPU.
--
-- Now the trigger appends one narrow row to mailroom_signups (the account's id and the time of
-- the request), a table with no index, no key and no foreign key. The collector takes the queued
-- rows in batches (mailroom_collect_signups, before each dequeue) and creates the activation
-- tokens there, deciding the abuse limits as for any token (before_token_insert_limits).
--
-- The new trigger function and mailroom_collect_signups are in migrations/functions/, applied
-- after this migration.

CREATE TABLE mailroom_signups (
    account      BIGINT NOT NULL,   -- accounts.id; no foreign key: a deleted account's row is dropped
    requested_at BIGINT NOT NULL DEFAULT EXTRACT(EPOCH FROM now())::BIGINT  -- the token's created_at
) WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 10000,
        autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 10000,
        autovacuum_vacuum_cost_delay = 0);

-- The signup's trigger runs as the role that inserts the account: every role (or PUBLIC) that
-- may insert into accounts may queue its signups, from this transaction on, so signups keep
-- working through the upgrade.
DO $$
DECLARE
    r RECORD;
BEGIN
    FOR r IN SELECT DISTINCT a.grantee FROM pg_class c CROSS JOIN LATERAL aclexplode(c.relacl) a
              WHERE c.oid = 'accounts'::regclass AND a.privilege_type = 'INSERT' LOOP
        IF r.grantee = 0 THEN
            GRANT INSERT ON mailroom_signups TO PUBLIC;
        ELSE
            -- A regrole's text is the role's name, quoted where it needs it.
            EXECUTE format('GRANT INSERT ON mailroom_signups TO %s', r.grantee::regrole);
        END IF;
    END LOOP;
END;
$$;

-- The wake-up trigger's function now serves both tables: renamed, it keeps the tokens trigger
-- that uses it until its file (trg_wake_collector) replaces the body. A database whose function
-- files were never applied has no function to rename.
DO $$
BEGIN
    IF to_regprocedure('trg_after_token_inserted()') IS NOT NULL THEN
        ALTER FUNCTION trg_after_token_inserted() RENAME TO trg_wake_collector;
    END IF;
END;
$$;
