-- The budget model: one budget per consumer group, enforced centrally.
--
-- Every sender of a group asks the collector for permission before it sends: a *grant* of a
-- few emails (mailroom_budget_grant). A grant is charged to the group's month when it is
-- issued (budget_months.granted_micros), before any of its emails is sent; a sender gives back
-- what it did not use (mailroom_budget_return: graceful shutdown, a grant that ran out of time
-- unused). Acknowledgements settle the spend (mailroom_ack adds each SENT cost to
-- group_usage); the month's *committed* money is
--     greatest(granted - returned, what acknowledgements recorded)
-- and a grant is refused when it would take committed past the budget. (The month's first
-- grant charges what acknowledgements recorded before it, so spend from senders that predate
-- central budgets counts once.)
--
-- Why no sequence of restarts, kills or reconnects can spend more than the budget:
-- * every email a sender sends is covered by a grant charged before the send, in a committed
--   transaction; the charge is durable whatever happens to the sender afterwards;
-- * grants of one group are serialised by the row lock on group_budgets, so two collectors or
--   two concurrent requests cannot both take the last money;
-- * money comes back only through mailroom_budget_return, i.e. from a live holder saying it
--   will not use it, and never more than its grant holds. A grant whose holder died (kill -9)
--   stays charged when its lease (expires_at) ends: the grant alone does not tell the emails
--   that holder sent and never acknowledged from those it did not send, and returning them
--   would let a crash overspend. (mailroom_budget_refund gives back the part that the jobs
--   handed to the holder's subscriptions bound as unused: see its file.)
-- * a holder must not start a send after its grant's expires_at (senders stop earlier, by a
--   margin), so an expired grant's emails are no longer in use when its row is pruned.
--
-- Pace: a token bucket per group (group_budgets.bucket_micros), refilled at
-- (budget - committed) / (time left in the UTC month), holding at most `burst` emails; each
-- grant takes its emails from it, so all senders of the group together keep to one pace.
-- A grant is at most one second of pace (at least one email) and at most `burst` emails.
--
-- Recovery reserve: a share of the month's budget (recovery_reserve_percent, default from the
-- collector) can only be granted to password recoveries, so a signup spike cannot starve them.
--
-- The budget, reserve and burst of a group are set with SQL (UPDATE group_budgets) or the
-- operator RPC SetGroupBudget; NULL budget or reserve means "the collector's default"
-- (MAILROOM_DEFAULT_GROUP_BUDGET, MAILROOM_RECOVERY_RESERVE_PERCENT).
--
-- Grants up to p_emails emails at p_price micro-units each to p_holder for p_lease_ms, within
-- the group's budget, reserve and pace. emails = 0 with retry_after_ms: the next email of the
-- pace is that far away; emails = 0 with exhausted: no money left for this class this month
-- (until an operator raises the budget). A NULL budget (default included) is unlimited:
-- everything asked is granted, nothing is paced. Old grants are pruned elsewhere
-- (mailroom_prune_budget_grants).
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
