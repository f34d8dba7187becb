-- Grants up to p_emails emails at p_price micro-units each to p_holder for p_lease_ms, within
-- group p_group's budget, recovery reserve and pace. Called by the collector's AcquireBudget
-- (PgBudgetStore::Grant). emails = 0 with retry_after_ms: the next email of the pace is that far
-- away; with exhausted: no money left for this class this month. A NULL budget (the default
-- included) grants everything asked, unpaced. Guarantees that no sequence of restarts, kills or
-- reconnects spends more than the budget (docs/design.md, "One budget per group").
CREATE OR REPLACE FUNCTION mailroom.mailroom_budget_grant(p_group text, p_holder text, p_emails integer, p_recovery boolean, p_price bigint, p_lease_ms integer, p_default_budget bigint, p_default_reserve integer) RETURNS TABLE(grant_id bigint, emails integer, expires_at timestamp with time zone, retry_after_ms bigint, exhausted boolean, pace_per_second double precision)
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
#variable_conflict use_variable
DECLARE
    v_gid     INT;
    b         group_budgets%ROWTYPE;
    s         RECORD;
    v_remain  BIGINT;
    v_avail   BIGINT;
    v_rate    DOUBLE PRECISION;  -- micro-units per second
    v_cap     DOUBLE PRECISION;
    v_tokens  DOUBLE PRECISION;
    v_n       BIGINT;
    v_id      BIGINT;
    v_expires TIMESTAMPTZ := now() + make_interval(secs => p_lease_ms / 1000.0);
BEGIN
    IF p_emails < 1 OR p_price < 1 OR p_lease_ms < 1 THEN
        RAISE EXCEPTION 'emails, price and lease must be positive' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT id INTO v_gid FROM consumer_groups WHERE name = p_group;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown consumer group "%"', p_group USING ERRCODE = 'no_data_found';
    END IF;
    INSERT INTO group_budgets (group_id) VALUES (v_gid) ON CONFLICT DO NOTHING;
    -- The lock that serialises every grant of the group.
    SELECT * INTO b FROM group_budgets WHERE group_id = v_gid FOR UPDATE;
    s := mailroom_budget_state(v_gid, p_default_budget, p_default_reserve);

    IF s.budget_micros IS NULL THEN
        v_n := p_emails;
        v_rate := 'Infinity';
    ELSE
        v_remain := s.budget_micros - s.committed_micros;
        v_rate := greatest(v_remain, 0) / s.seconds_left;
        v_cap := b.burst::DOUBLE PRECISION * p_price;
        v_tokens := CASE WHEN b.bucket_at IS NULL THEN v_cap
                         ELSE least(v_cap, b.bucket_micros + v_rate *
                                    greatest(0, EXTRACT(EPOCH FROM now() - b.bucket_at)))
                    END;
        v_avail := v_remain - CASE WHEN p_recovery THEN 0
                                   ELSE s.budget_micros * s.reserve_percent / 100 END;
        v_n := least(p_emails::BIGINT, b.burst::BIGINT,
                     greatest(0, floor(v_tokens / p_price))::BIGINT,
                     greatest(0, v_avail / p_price),
                     greatest(1, ceil(v_rate / p_price))::BIGINT);
        v_n := greatest(v_n, 0);
        UPDATE group_budgets SET bucket_micros = v_tokens - v_n * p_price, bucket_at = now()
         WHERE group_id = v_gid;
        IF v_n = 0 THEN
            IF v_avail < p_price THEN
                RETURN QUERY SELECT NULL::BIGINT, 0, NULL::TIMESTAMPTZ, 60000::BIGINT, true,
                                    v_rate / p_price;
            ELSE
                RETURN QUERY SELECT NULL::BIGINT, 0, NULL::TIMESTAMPTZ,
                                    greatest(1, ceil((p_price - v_tokens) / v_rate * 1000))::BIGINT,
                                    false, v_rate / p_price;
            END IF;
            RETURN;
        END IF;
    END IF;

    -- The month's first grant also charges what acknowledgements recorded before it (spend
    -- from before central budgets), so every later SENT is covered by a grant.
    INSERT INTO budget_months AS m (group_id, month, granted_micros)
    VALUES (v_gid, s.month, s.spent_micros + v_n * p_price)
    ON CONFLICT (group_id, month) DO UPDATE SET granted_micros = m.granted_micros + v_n * p_price;
    INSERT INTO budget_grants (group_id, month, holder, recovery, price_micros, emails, expires_at)
    VALUES (v_gid, s.month, p_holder, p_recovery, p_price, v_n, v_expires)
    RETURNING id INTO v_id;
    RETURN QUERY SELECT v_id, v_n::INT, v_expires, 0::BIGINT, false,
                        CASE WHEN s.budget_micros IS NULL THEN 'Infinity'::DOUBLE PRECISION
                             ELSE v_rate / p_price END;
END;
$$;
