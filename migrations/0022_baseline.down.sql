-- Removes everything the baseline and the files in functions/ and views/ created.
-- pgcrypto is left installed: other schemas may use it.
DROP VIEW IF EXISTS delivery_states;
DROP TABLE IF EXISTS suppressions CASCADE;
DROP TABLE IF EXISTS soft_bounces CASCADE;
DROP TABLE IF EXISTS sns_messages CASCADE;
DROP TABLE IF EXISTS reputation_hourly CASCADE;
DROP TABLE IF EXISTS mailroom_settings CASCADE;
DROP TABLE IF EXISTS group_usage CASCADE;
DROP TABLE IF EXISTS group_budgets CASCADE;
DROP TABLE IF EXISTS lease_batches CASCADE;
DROP TABLE IF EXISTS delivery_counts CASCADE;
DROP TABLE IF EXISTS deliveries CASCADE;
DROP TABLE IF EXISTS consumer_groups CASCADE;
DROP TABLE IF EXISTS budget_subscriptions CASCADE;
DROP TABLE IF EXISTS budget_months CASCADE;
DROP TABLE IF EXISTS budget_grants CASCADE;
DROP TABLE IF EXISTS accounts CASCADE;
DROP TABLE IF EXISTS tokens CASCADE;
-- Every function of this schema (the ones functions/ defines), whatever their signatures.
DO $$
DECLARE
    f REGPROCEDURE;
BEGIN
    FOR f IN SELECT p.oid FROM pg_proc p
              WHERE p.pronamespace = current_schema()::REGNAMESPACE
                AND (p.proname LIKE 'mailroom\_%' OR p.proname LIKE 'trg\_%')
                AND NOT EXISTS (SELECT 1 FROM pg_depend d
                                 WHERE d.objid = p.oid AND d.deptype = 'e')
    LOOP
        EXECUTE format('DROP FUNCTION %s', f);
    END LOOP;
END;
$$;
DROP TYPE IF EXISTS token_action;
DROP TYPE IF EXISTS delivery_state;
DROP TYPE IF EXISTS account_status;
-- Versions older than the baseline are part of it.
DELETE FROM schema_migrations WHERE version < 22;
