-- Everything mailroom creates lives in its own schema, `mailroom`, owned by the migrations' role
-- with CREATE for nobody else, and every function pins its search_path to it (the function
-- files, applied after this migration). Before, the objects lived in the schema the migrations'
-- role created them in (usually `public`, where the database's owner and, before PostgreSQL 15,
-- every role may create objects): a role that could create there could place look-alike
-- overloads of mailroom's functions in the search path of mailroom's own sessions.
--
-- `collector migrate` creates the schema and runs the versioned migrations with the search path
-- `mailroom, <the schema that held schema_migrations>`: on a fresh install the baseline already
-- created everything in `mailroom` and this migration moves nothing; on an install that predates
-- it, this moves (from there: the migrations between its version and this one created theirs in
-- `mailroom` already) every table (with its indexes, constraints, owned sequences, triggers and
-- grants), standalone sequence, type, view and function of mailroom's from there into
-- `mailroom`. The function files then replace each function in place. pgcrypto, whose
-- gen_random_bytes the tokens' default and the code generator call, moves too when it is
-- elsewhere: the functions' pinned search path no longer reaches other schemas. An application
-- that calls pgcrypto's functions by an unqualified name finds them once `mailroom` is in its
-- search path (docs/integration.md).
--
-- Reverting (down) leaves the objects in `mailroom`: the previous releases' functions found
-- their tables through the session's search path, so after a revert add `mailroom` to the
-- search path of the roles that run them.

DO $$
DECLARE
    v_old  regnamespace := (SELECT c.relnamespace::regnamespace FROM pg_class c
                             WHERE c.oid = 'mailroom_settings'::regclass);
    v_name text;
    v_oid  oid;
BEGIN
    IF v_old = 'mailroom'::regnamespace THEN
        RETURN;
    END IF;
    FOREACH v_name IN ARRAY ARRAY[
        'accounts', 'tokens', 'budget_grants', 'budget_months', 'budget_subscriptions',
        'consumer_groups', 'deliveries', 'delivery_counts', 'group_budgets', 'group_usage',
        'lease_batches', 'mailroom_address_requests', 'mailroom_collectors', 'mailroom_settings',
        'mailroom_signups', 'reputation_hourly', 'sns_messages', 'soft_bounces', 'suppressions']
    LOOP
        IF to_regclass(format('%I.%I', v_old, v_name)) IS NOT NULL THEN
            EXECUTE format('ALTER TABLE %I.%I SET SCHEMA mailroom', v_old, v_name);
        END IF;
    END LOOP;
    FOREACH v_name IN ARRAY ARRAY['mailroom_idle_collectors', 'mailroom_collection_xact'] LOOP
        IF to_regclass(format('%I.%I', v_old, v_name)) IS NOT NULL THEN
            EXECUTE format('ALTER SEQUENCE %I.%I SET SCHEMA mailroom', v_old, v_name);
        END IF;
    END LOOP;
    FOREACH v_name IN ARRAY ARRAY['account_status', 'delivery_state', 'token_action'] LOOP
        EXECUTE format('ALTER TYPE %I.%I SET SCHEMA mailroom', v_old, v_name);
    END LOOP;
    IF to_regclass(format('%I.delivery_states', v_old)) IS NOT NULL THEN
        EXECUTE format('ALTER VIEW %I.delivery_states SET SCHEMA mailroom', v_old);
    END IF;
    -- Every function of mailroom's: the names of migrations/functions/ at this version.
    FOR v_oid IN
        SELECT p.oid FROM pg_proc p
         WHERE p.pronamespace = v_old
           AND p.proname = ANY (ARRAY[
               'mailroom_ack', 'mailroom_address_limit', 'mailroom_batch_keep_sent',
               'mailroom_batch_match', 'mailroom_batch_record', 'mailroom_batch_unpack',
               'mailroom_bits', 'mailroom_budget_grant', 'mailroom_budget_handed',
               'mailroom_budget_recovery_first', 'mailroom_budget_refund', 'mailroom_budget_return',
               'mailroom_budget_settled', 'mailroom_budget_state', 'mailroom_budget_unspent',
               'mailroom_collect_signups', 'mailroom_collector_mark',
               'mailroom_compact_budget_grants', 'mailroom_compact_delivery_counts',
               'mailroom_compact_reputation', 'mailroom_dequeue', 'mailroom_ensure_group',
               'mailroom_expire_leases', 'mailroom_finished_state', 'mailroom_holder_left',
               'mailroom_limit_reason', 'mailroom_prune_address_requests',
               'mailroom_prune_budget_grants', 'mailroom_prune_budget_subscriptions',
               'mailroom_prune_deliveries', 'mailroom_prune_lease_batches',
               'mailroom_prune_soft_bounces', 'mailroom_prune_tokens', 'mailroom_random_code',
               'mailroom_record_feedback', 'mailroom_record_sent', 'mailroom_release',
               'mailroom_renew', 'mailroom_reputation', 'mailroom_reputation_add',
               'mailroom_stats', 'mailroom_suppress_addresses', 'mailroom_suppress_recipients',
               'mailroom_suppression', 'mailroom_token_sendable', 'trg_after_token_consumed',
               'trg_before_account_insert', 'trg_before_account_status_change',
               'trg_before_token_insert_limits', 'trg_deliveries_count_insert',
               'trg_deliveries_count_update', 'trg_wake_collector'])
    LOOP
        EXECUTE format('ALTER FUNCTION %s SET SCHEMA mailroom', v_oid::regprocedure);
    END LOOP;
END;
$$;

DO $$
BEGIN
    IF (SELECT e.extnamespace <> 'mailroom'::regnamespace FROM pg_extension e
         WHERE e.extname = 'pgcrypto') THEN
        ALTER EXTENSION pgcrypto SET SCHEMA mailroom;
    END IF;
END;
$$;

-- The collectors' turns: a transaction holds its turn by locking the table (EXCLUSIVE mode,
-- which takes UPDATE, DELETE or TRUNCATE on it, so only mailroom's roles can), never by an
-- advisory lock, which any role that can connect may take and hold.
CREATE TABLE mailroom_retention_turn ();
COMMENT ON TABLE mailroom_retention_turn IS
    'Locked (EXCLUSIVE) by the collector running the retention pass; holds no rows.';
