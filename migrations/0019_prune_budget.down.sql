-- Back to 0017: the grant prunes expired grants again, the refund groups every grant.
DROP FUNCTION mailroom_compact_budget_grants(BIGINT, TIMESTAMPTZ, INT);
DROP FUNCTION mailroom_prune_soft_bounces(INT);
DROP FUNCTION mailroom_prune_budget_subscriptions(TIMESTAMPTZ, INT);
DROP FUNCTION mailroom_prune_budget_grants(BIGINT, TIMESTAMPTZ, INT);

CREATE OR REPLACE FUNCTION mailroom_budget_grant(p_group TEXT, p_holder TEXT, p_emails INT,
                                      p_recovery BOOLEAN, p_price BIGINT, p_lease_ms INT,
                                      p_default_budget BIGINT, p_default_reserve INT)
    RETURNS TABLE (grant_id BIGINT, emails INT, expires_at TIMESTAMPTZ, retry_after_ms BIGINT,
                   exhausted BOOLEAN, pace_per_second DOUBLE PRECISION)
    LANGUAGE plpgsql AS $$
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

    -- Expired grants are kept an hour for operators, then pruned (a few rows per call).
    DELETE FROM budget_grants WHERE id IN (
        SELECT g.id FROM budget_grants g WHERE g.expires_at < now() - INTERVAL '1 hour'
         ORDER BY g.expires_at LIMIT 100);

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

CREATE OR REPLACE FUNCTION mailroom_budget_refund(p_margin_ms INT)
    RETURNS TABLE (group_name TEXT, holder TEXT, emails BIGINT)
    LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    h        RECORD;
    gr       RECORD;
    v_cutoff TIMESTAMPTZ := now() - make_interval(secs => greatest(p_margin_ms, 0) / 1000.0);
    v_left   BIGINT;
    v_n      INT;
BEGIN
    FOR h IN
        SELECT bg.group_id, bg.holder
          FROM budget_grants bg
         WHERE EXISTS (SELECT 1 FROM budget_subscriptions s
                        WHERE s.group_id = bg.group_id AND s.holder = bg.holder)
         GROUP BY bg.group_id, bg.holder
        HAVING max(bg.expires_at) < v_cutoff AND sum(bg.emails - bg.returned_emails) > 0
    LOOP
        -- The lock mailroom_budget_return takes too; then everything is read again under it.
        PERFORM 1 FROM budget_grants bg
          WHERE bg.group_id = h.group_id AND bg.holder = h.holder
          ORDER BY bg.id FOR UPDATE;
        CONTINUE WHEN EXISTS (SELECT 1 FROM budget_grants bg
                               WHERE bg.group_id = h.group_id AND bg.holder = h.holder
                                 AND bg.expires_at >= v_cutoff);
        CONTINUE WHEN EXISTS (SELECT 1 FROM budget_subscriptions s
                                JOIN deliveries d ON d.owner = s.owner AND d.group_id = s.group_id
                               WHERE s.group_id = h.group_id AND s.holder = h.holder
                                 AND d.state = 'leased' AND d.due_at > now());
        SELECT (SELECT coalesce(sum(bg.emails - bg.returned_emails), 0)
                  FROM budget_grants bg
                 WHERE bg.group_id = h.group_id AND bg.holder = h.holder)
             - (SELECT coalesce(sum(greatest(s.handed - s.settled_unsent, 0)), 0)
                  FROM budget_subscriptions s
                 WHERE s.group_id = h.group_id AND s.holder = h.holder)
          INTO v_left;
        CONTINUE WHEN v_left <= 0;
        group_name := (SELECT c.name FROM consumer_groups c WHERE c.id = h.group_id);
        holder := h.holder;
        emails := v_left;
        -- Newest grants first (the current month's, when a month ended in between).
        FOR gr IN
            SELECT bg.id, bg.month, bg.price_micros, bg.emails - bg.returned_emails AS room
              FROM budget_grants bg
             WHERE bg.group_id = h.group_id AND bg.holder = h.holder
               AND bg.returned_emails < bg.emails
             ORDER BY bg.id DESC
        LOOP
            EXIT WHEN v_left = 0;
            v_n := least(v_left, gr.room);
            UPDATE budget_grants SET returned_emails = returned_emails + v_n WHERE id = gr.id;
            UPDATE budget_months SET returned_micros = returned_micros + v_n * gr.price_micros
             WHERE group_id = h.group_id AND month = gr.month;
            v_left := v_left - v_n;
        END LOOP;
        UPDATE budget_grants bg SET refunded = true
         WHERE bg.group_id = h.group_id AND bg.holder = h.holder;
        RETURN NEXT;
    END LOOP;
END;
$$;

DROP FUNCTION mailroom_budget_unspent(INT, TEXT);
DROP INDEX soft_bounces_bounced_at_idx;
DROP INDEX budget_grants_holder_idx;
CREATE INDEX budget_grants_expiry_idx ON budget_grants (expires_at);
