-- Step 1 of mailroom_dequeue for one class of group p_group_id (whose row lock the caller
-- holds): leases to p_owner until p_due up to p_limit of its jobs due again (the critical
-- class's with p_recovery, else the normal and notice classes' together: they are not told
-- apart once leased), longest waiting first: leases that ran out (lost_leases + 1 unless the
-- holder left) and retries whose time has come, each attempt + 1. Those that must not be sent
-- any more are finished instead (mailroom_dequeue_finish). Returns the jobs leased, their
-- secret and code as stored (the caller leaves out what an action does not carry). Rows
-- another transaction holds are skipped.
-- Called by mailroom_dequeue only: its statements are planned under that function's settings.
CREATE OR REPLACE FUNCTION mailroom.mailroom_dequeue_due(p_group_id integer, p_max_lost_leases integer, p_recovery boolean, p_limit integer, p_owner text, p_due timestamp with time zone, p_names text[], p_needed mailroom.account_status[]) RETURNS TABLE(id bigint, action text, email text, login text, secret bytea, code text, expires_at bigint, account bigint, attempt integer, failures integer, created_at bigint, locale text, priority text)
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
#variable_conflict use_column
DECLARE
    v_tids TID[];
    v_ids  BIGINT[];
BEGIN
    -- Two statements: a generic plan reads the critical class's partial index
    -- (deliveries_due_recovery_idx) only for a query that says `d.recovery` itself.
    IF p_recovery THEN
        SELECT array_agg(x.ctid) INTO v_tids
          FROM (SELECT d.ctid FROM deliveries d
                 WHERE d.group_id = p_group_id AND d.state IN ('leased', 'retry') AND d.recovery
                   AND d.due_at <= now()
                 ORDER BY d.due_at LIMIT p_limit
                   FOR UPDATE SKIP LOCKED) x;
    ELSE
        SELECT array_agg(x.ctid) INTO v_tids
          FROM (SELECT d.ctid FROM deliveries d
                 WHERE d.group_id = p_group_id AND d.state IN ('leased', 'retry')
                   AND NOT d.recovery AND d.due_at <= now()
                 ORDER BY d.due_at LIMIT p_limit
                   FOR UPDATE SKIP LOCKED) x;
    END IF;
    IF v_tids IS NULL THEN
        RETURN;
    END IF;
    -- The rows are locked by this transaction since the statement above: their ctids stay
    -- theirs, and a TID scan is the only plan.
    WITH upd AS (
        UPDATE deliveries d
           SET lost_leases = d.lost_leases + (d.state = 'leased' AND NOT d.holder_left)::INT,
               attempts = d.attempts + 1, state = 'leased', owner = p_owner,
               due_at = p_due, holder_left = false, updated_at = now()
         WHERE d.ctid = ANY (v_tids)
        RETURNING d.token_id
    )
    SELECT array_agg(token_id) INTO v_ids FROM upd;
    PERFORM mailroom_dequeue_finish(p_group_id, p_max_lost_leases, v_ids, p_names, p_needed);

    RETURN QUERY
    SELECT t.id, t.action, coalesce(t.to_address, a.email::TEXT), a.login::TEXT, t.secret,
           t.code::TEXT, t.expires_at, t.account, d.attempts, d.failures, t.created_at,
           a.locale, t.priority::TEXT
      FROM unnest(v_ids) AS u(id)
     CROSS JOIN LATERAL (SELECT d.attempts, d.failures, d.state FROM deliveries d
                          WHERE d.group_id = p_group_id AND d.token_id = u.id OFFSET 0) d
     CROSS JOIN LATERAL (SELECT t.* FROM tokens t WHERE t.id = u.id OFFSET 0) t
     CROSS JOIN LATERAL (SELECT a.email, a.login, a.locale FROM accounts a
                          WHERE a.id = t.account OFFSET 0) a
     WHERE d.state = 'leased';
END;
$$;
