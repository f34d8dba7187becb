-- Back before 0049: the audit, its setting and the operator's pause go, with the functions that
-- use them; mailroom_dequeue is put back as it was (not left to its source file, which reads the
-- pause), so that jobs keep being handed out until the next `collector migrate up`.
DROP FUNCTION IF EXISTS mailroom.mailroom_pause_group(text, boolean, text);
DROP FUNCTION IF EXISTS mailroom.mailroom_group_hourly(text, integer);
DROP FUNCTION IF EXISTS mailroom.mailroom_group_id(text);
DROP FUNCTION IF EXISTS mailroom.mailroom_find_emails(text, text, bigint, integer);
DROP FUNCTION IF EXISTS mailroom.mailroom_delivery_of(integer, bigint);
DROP FUNCTION IF EXISTS mailroom.mailroom_email_ledger(integer, bigint[]);
DROP FUNCTION IF EXISTS mailroom.mailroom_group_trouble(text, timestamptz, integer);
DROP FUNCTION IF EXISTS mailroom.mailroom_audit(text, text, text, text);
DROP FUNCTION IF EXISTS mailroom.mailroom_audit_end(bigint, text);
DROP FUNCTION IF EXISTS mailroom.mailroom_list_audit(bigint, integer);
DROP FUNCTION IF EXISTS mailroom.mailroom_prune_operator_audit(integer);
DROP TABLE IF EXISTS mailroom.operator_audit;
ALTER TABLE mailroom.mailroom_settings DROP COLUMN audit_retention_days;

CREATE OR REPLACE FUNCTION mailroom.mailroom_dequeue(p_group text, p_limit integer, p_owner text, p_lease_ms integer, p_recoveries_only boolean DEFAULT false, p_default_budget bigint DEFAULT NULL) RETURNS TABLE(job_id bigint, action text, email text, login text, secret bytea, code text, expires_at bigint, account_id bigint, attempt integer, failures integer, created_at bigint, locale text, priority text)
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    SET enable_seqscan TO 'off'
    SET enable_bitmapscan TO 'off'
    SET enable_sort TO 'off'
    SET plan_cache_mode TO 'force_generic_plan'
    SET jit TO 'off'
    AS $$
#variable_conflict use_column
DECLARE
    g          consumer_groups%ROWTYPE;
    v_due      TIMESTAMPTZ := now() + make_interval(secs => p_lease_ms / 1000.0);
    v_left     INT := p_limit;
    v_class    action_priority;
    v_paused   BOOLEAN;
    v_nosecret TEXT[];
    v_nocode   TEXT[];
    v_names    TEXT[];
    v_needed   account_status[];
    v_returned INT;
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    SELECT * INTO g FROM consumer_groups WHERE name = p_group FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown consumer group "%"', p_group USING ERRCODE = 'no_data_found';
    END IF;
    -- The actions whose jobs carry no secret, or no code, and the account status each needs
    -- (read once per call: a small table; v_needed[array_position(v_names, action)]).
    SELECT coalesce(array_agg(x.name) FILTER (WHERE NOT x.carries_secret), '{}'),
           coalesce(array_agg(x.name) FILTER (WHERE NOT x.carries_code
                                              AND x.name <> 'activation'), '{}'),
           array_agg(x.name), array_agg(x.account_status)
      INTO v_nosecret, v_nocode, v_names, v_needed
      FROM actions x;
    IF p_limit > 0 THEN
        PERFORM mailroom_dequeue_expire(g.id, p_recoveries_only);
    END IF;

    FOREACH v_class IN ARRAY ARRAY['critical', 'normal', 'notice']::action_priority[] LOOP
        EXIT WHEN v_left <= 0;
        -- The critical lane: the other classes' passes (and cursors) are left untouched.
        EXIT WHEN p_recoveries_only AND v_class <> 'critical';
        IF v_class = 'notice' THEN
            -- Notices wait while the month's budget left is under the pause threshold.
            SELECT b.budget_micros IS NOT NULL
                   AND (b.budget_micros - b.committed_micros) * 100
                       < b.budget_micros * st.notice_pause_percent
              INTO v_paused
              FROM mailroom_budget_state(g.id, p_default_budget, 0) b
             CROSS JOIN mailroom_settings st;
            EXIT WHEN v_paused;
        ELSE
            -- Notices due again are the normal class's (not told apart once leased).
            RETURN QUERY
            SELECT j.id, j.action, j.email, j.login,
                   CASE WHEN j.action = ANY (v_nosecret) THEN NULL ELSE j.secret END,
                   CASE WHEN j.action = ANY (v_nocode) THEN NULL ELSE j.code END,
                   j.expires_at, j.account, j.attempt, j.failures, j.created_at, j.locale,
                   j.priority
              FROM mailroom_dequeue_due(g.id, g.max_lost_leases, v_class = 'critical', v_left,
                                        p_owner, v_due, v_names, v_needed) j;
            GET DIAGNOSTICS v_returned = ROW_COUNT;
            v_left := v_left - v_returned;
        END IF;
        CONTINUE WHEN v_left <= 0;
        RETURN QUERY
        SELECT j.id, j.action, j.email, j.login,
               CASE WHEN j.action = ANY (v_nosecret) THEN NULL ELSE j.secret END,
               CASE WHEN j.action = ANY (v_nocode) THEN NULL ELSE j.code END,
               j.expires_at, j.account, 1, 0, j.created_at, j.locale, v_class::TEXT
          FROM mailroom_dequeue_new(g.id, v_class, v_left, p_owner, v_due, v_names, v_needed) j;
        GET DIAGNOSTICS v_returned = ROW_COUNT;
        v_left := v_left - v_returned;
    END LOOP;
END;
$$;

ALTER TABLE mailroom.consumer_groups DROP COLUMN paused_at, DROP COLUMN paused_reason;
