-- Leases up to p_limit jobs of a group to p_owner for p_lease_ms (none while an operator has paused
-- the group: consumer_groups.paused_at), class by class (the action's priority: critical, then
-- normal, then notice), each class first its jobs due again (mailroom_dequeue_due: leases that ran
-- out, retries whose time has come), then its new tokens from its own snapshot window
-- (mailroom_dequeue_new, on the class's row of group_cursors), leased as one lease_batches row per
-- window (`recovery` marks the critical class). Before the classes, lease batches whose lease ran
-- out become jobs due again (mailroom_dequeue_expire). p_recoveries_only: the critical class only
-- (the lane). Notices are not leased while the group's month has less than
-- mailroom_settings.notice_pause_percent of its budget left (p_default_budget: the collector's
-- default for a group without a budget of its own); they wait, and expire unsent if the budget
-- stays short (docs/design.md, "Priority classes").
-- Each job carries its action's name; its secret is NULL for an action without one, its code
-- NULL for an action without one (but activation's, sent unsigned as before), its address the
-- token's to_address where it has one, its priority its token's class. Serialised per group by
-- the group row's lock, which every part relies on: two collectors never hand the same job out
-- twice. Tokens not to send are recorded with their state and reason by the parts. Plans are
-- made once per session (force_generic_plan), the parts' under these settings too (settings of
-- their own cost an empty dequeue about 80 µs more). The calling transaction commits
-- asynchronously (synchronous_commit off, which a caller may set back on after the call): a
-- lost dequeue only hands its jobs out again. The parts: docs/design.md, "The dequeue in
-- parts".
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
    ELSIF g.paused_at IS NOT NULL THEN
        RETURN;  -- paused by an operator (mailroom_pause_group): nothing is handed out
    END IF;
    -- The actions whose jobs carry no secret or no code, and the status each needs (read once
    -- per call: a small table; v_needed[array_position(v_names, action)]).
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
