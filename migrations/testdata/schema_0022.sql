--
-- PostgreSQL database dump
--


-- Dumped from database version 15.18 (Debian 15.18-0+deb12u1)
-- Dumped by pg_dump version 15.18 (Debian 15.18-0+deb12u1)

SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

--
-- Name: pgcrypto; Type: EXTENSION; Schema: -; Owner: -
--

CREATE EXTENSION IF NOT EXISTS pgcrypto WITH SCHEMA public;


--
-- Name: EXTENSION pgcrypto; Type: COMMENT; Schema: -; Owner: -
--

COMMENT ON EXTENSION pgcrypto IS 'cryptographic functions';


--
-- Name: account_status; Type: TYPE; Schema: public; Owner: -
--

CREATE TYPE public.account_status AS ENUM (
    'provisioned',
    'active',
    'suspended'
);


--
-- Name: delivery_state; Type: TYPE; Schema: public; Owner: -
--

CREATE TYPE public.delivery_state AS ENUM (
    'leased',
    'retry',
    'sent',
    'failed',
    'expired',
    'cancelled',
    'superseded',
    'rate_limited',
    'suppressed'
);


--
-- Name: token_action; Type: TYPE; Schema: public; Owner: -
--

CREATE TYPE public.token_action AS ENUM (
    'activation',
    'password_recovery'
);


--
-- Name: mailroom_ack(text, text, bigint[], integer[], text[], text[], integer[], bigint[], text[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.mailroom_ack(p_group text, p_owner text, p_ids bigint[], p_attempts integer[], p_outcomes text[], p_reasons text[], p_retry_ms integer[], p_costs bigint[], p_message_ids text[] DEFAULT NULL::text[]) RETURNS SETOF bigint
    LANGUAGE plpgsql
    SET enable_seqscan TO 'off'
    SET enable_bitmapscan TO 'off'
    AS $$
DECLARE
    gid     INT;
    v_ids   BIGINT[] := p_ids;
    v_att   INT[] := p_attempts;
    v_out   TEXT[] := p_outcomes;
    v_rsn   TEXT[] := p_reasons;
    v_ms    INT[] := p_retry_ms;
    v_cost  BIGINT[] := p_costs;
    v_mid   TEXT[] := p_message_ids;
    v_mb    BIGINT[];
    v_slot  INT[];
    v_ord   INT[];
    v_kept  BOOLEAN[];
    v_match BIGINT[];
    v_plain BIGINT;
    v_sent  BIGINT;
    v_sum   BIGINT;
    v_tids  TID[];
    v_done  BIGINT[];
BEGIN
    SELECT id INTO gid FROM consumer_groups WHERE name = p_group;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown consumer group "%"', p_group USING ERRCODE = 'no_data_found';
    END IF;
    IF coalesce(cardinality(p_ids), 0) = 0 THEN
        RETURN;
    END IF;
    -- One outcome per id, as 0003's DISTINCT ON; the sort only when an id repeats.
    IF (SELECT count(DISTINCT u.id) FROM unnest(p_ids) AS u(id)) <> cardinality(p_ids) THEN
        SELECT array_agg(u.id), array_agg(u.attempt), array_agg(u.outcome), array_agg(u.reason),
               array_agg(u.retry_ms), array_agg(u.cost), array_agg(u.mid)
          INTO v_ids, v_att, v_out, v_rsn, v_ms, v_cost, v_mid
          FROM (SELECT DISTINCT ON (u.id) *
                  FROM unnest(p_ids, p_attempts, p_outcomes, p_reasons, p_retry_ms, p_costs,
                              p_message_ids)
                           AS u(id, attempt, outcome, reason, retry_ms, cost, mid)
                 ORDER BY u.id) u;
    END IF;

    -- 1. Jobs in a batch leased to p_owner (attempt 1, no outcome yet), the batches locked. Every
    --    outcome but a plain SENT keeps its per-job row (bit set, same transaction): the states,
    --    failures, reasons, costs and lease ends 0020 writes.
    WITH m AS MATERIALIZED (
        SELECT m.batch_id, m.slot, m.ord, m.recovery, u.id, u.outcome, u.reason, u.retry_ms,
               u.cost, u.mid, (u.outcome <> 'sent' OR coalesce(u.mid, '') <> '') AS kept
          FROM mailroom_batch_match(gid, p_owner, v_ids, v_att) m
          JOIN unnest(v_ids, v_out, v_rsn, v_ms, v_cost, v_mid) WITH ORDINALITY
                   AS u(id, outcome, reason, retry_ms, cost, mid, ord) ON u.ord = m.ord
    ), ins AS (
        INSERT INTO deliveries (group_id, token_id, state, attempts, failures, reason,
                                cost_micros, due_at, provider_message_id, recovery, updated_at)
        SELECT gid, m.id,
               CASE WHEN m.outcome IN ('retry', 'defer') THEN 'retry'
                    ELSE m.outcome END::delivery_state,
               1, (m.outcome = 'retry')::INT, NULLIF(left(m.reason, 1000), ''),
               CASE WHEN m.outcome = 'sent' THEN m.cost END,
               CASE WHEN m.outcome IN ('retry', 'defer')
                    THEN now() + make_interval(secs => m.retry_ms / 1000.0) END,
               NULLIF(m.mid, ''), m.recovery, now()
          FROM m
         WHERE m.kept
    )
    SELECT array_agg(m.batch_id), array_agg(m.slot), array_agg(m.ord), array_agg(m.kept),
           array_agg(m.id),
           count(*) FILTER (WHERE m.outcome = 'sent' AND NOT m.kept),
           count(*) FILTER (WHERE m.outcome = 'sent'),
           coalesce(sum(m.cost) FILTER (WHERE m.outcome = 'sent'), 0)
      INTO v_mb, v_slot, v_ord, v_kept, v_match, v_plain, v_sent, v_sum
      FROM m;
    IF v_mb IS NOT NULL THEN
        PERFORM mailroom_batch_record(v_mb, v_slot, v_kept);
        -- Plain SENT outcomes have no row: counted here (a row's outcome is counted by 0013's
        -- trigger); the costs of all SENT outcomes go to group_usage as before.
        IF v_plain > 0 THEN
            INSERT INTO delivery_counts (group_id, state, n) VALUES (gid, 'sent', v_plain);
        END IF;
        IF v_sent > 0 THEN
            INSERT INTO group_usage AS g (group_id, month, sent, cost_micros)
            VALUES (gid, date_trunc('month', now() AT TIME ZONE 'UTC')::DATE, v_sent, v_sum)
            ON CONFLICT (group_id, month) DO UPDATE
               SET sent = g.sent + EXCLUDED.sent,
                   cost_micros = g.cost_micros + EXCLUDED.cost_micros;
        END IF;
        RETURN QUERY SELECT unnest(v_match);
        IF cardinality(v_match) = cardinality(v_ids) THEN
            RETURN;
        END IF;
        -- The others go the per-job way below.
        SELECT array_agg(u.id), array_agg(u.attempt), array_agg(u.outcome), array_agg(u.reason),
               array_agg(u.retry_ms), array_agg(u.cost), array_agg(u.mid)
          INTO v_ids, v_att, v_out, v_rsn, v_ms, v_cost, v_mid
          FROM unnest(v_ids, v_att, v_out, v_rsn, v_ms, v_cost, v_mid) WITH ORDINALITY
                   AS u(id, attempt, outcome, reason, retry_ms, cost, mid, ord)
          LEFT JOIN unnest(v_ord) AS x(ord) ON x.ord = u.ord
         WHERE x.ord IS NULL;
    END IF;

    -- 2. Jobs with a deliveries row (0021's per-job path, unchanged).
    WHILE v_ids IS NOT NULL LOOP
        SELECT array_agg(d.ctid), array_agg(u.id), array_agg(u.attempt), array_agg(u.outcome),
               array_agg(u.reason), array_agg(u.retry_ms), array_agg(u.cost), array_agg(u.mid)
          INTO v_tids, v_ids, v_att, v_out, v_rsn, v_ms, v_cost, v_mid
          FROM unnest(v_ids, v_att, v_out, v_rsn, v_ms, v_cost, v_mid)
                   AS u(id, attempt, outcome, reason, retry_ms, cost, mid)
         CROSS JOIN LATERAL (SELECT d.ctid, d.state, d.owner, d.attempts FROM deliveries d
                              WHERE d.group_id = gid AND d.token_id = u.id OFFSET 0) d
         WHERE d.state = 'leased' AND d.owner = p_owner AND d.attempts = u.attempt;
        EXIT WHEN v_tids IS NULL;
        WITH upd AS (
            UPDATE deliveries d
               SET state = CASE WHEN u.outcome IN ('retry', 'defer') THEN 'retry'
                                ELSE u.outcome END::delivery_state,
                   failures = d.failures + (u.outcome = 'retry')::INT,
                   reason = NULLIF(left(u.reason, 1000), ''),
                   cost_micros = CASE WHEN u.outcome = 'sent' THEN u.cost END,
                   provider_message_id = CASE WHEN u.outcome = 'sent'
                                              THEN coalesce(NULLIF(u.mid, ''),
                                                            d.provider_message_id)
                                              ELSE d.provider_message_id END,
                   owner = NULL,
                   holder_left = false,
                   due_at = CASE WHEN u.outcome IN ('retry', 'defer')
                                 THEN now() + make_interval(secs => u.retry_ms / 1000.0) END,
                   updated_at = now()
              FROM unnest(v_tids, v_ids, v_att, v_out, v_rsn, v_ms, v_cost, v_mid)
                       AS u(tid, id, attempt, outcome, reason, retry_ms, cost, mid)
             WHERE d.ctid = u.tid
               AND coalesce(d.group_id = gid AND d.token_id = u.id AND d.state = 'leased'
                            AND d.owner = p_owner AND d.attempts = u.attempt, false)
            RETURNING d.token_id, u.outcome, u.cost
        ), usage AS (
            INSERT INTO group_usage AS g (group_id, month, sent, cost_micros)
            SELECT gid, date_trunc('month', now() AT TIME ZONE 'UTC')::DATE, count(*),
                   coalesce(sum(cost), 0)
              FROM upd WHERE outcome = 'sent'
            HAVING count(*) > 0
            ON CONFLICT (group_id, month) DO UPDATE
               SET sent = g.sent + EXCLUDED.sent,
                   cost_micros = g.cost_micros + EXCLUDED.cost_micros
        )
        SELECT array_agg(token_id) INTO v_done FROM upd;
        RETURN QUERY SELECT unnest(v_done);
        EXIT WHEN coalesce(cardinality(v_done), 0) = cardinality(v_ids);
        -- The ids not written: their rows moved since the probe; probe them again.
        SELECT array_agg(u.id), array_agg(u.attempt), array_agg(u.outcome), array_agg(u.reason),
               array_agg(u.retry_ms), array_agg(u.cost), array_agg(u.mid)
          INTO v_ids, v_att, v_out, v_rsn, v_ms, v_cost, v_mid
          FROM unnest(v_ids, v_att, v_out, v_rsn, v_ms, v_cost, v_mid)
                   AS u(id, attempt, outcome, reason, retry_ms, cost, mid)
          LEFT JOIN unnest(v_done) AS x(id) ON x.id = u.id
         WHERE x.id IS NULL;
    END LOOP;
END;
$$;


--
-- Name: mailroom_batch_match(integer, text, bigint[], integer[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.mailroom_batch_match(p_group integer, p_owner text, p_ids bigint[], p_attempts integer[]) RETURNS TABLE(batch_id bigint, slot integer, ord integer, recovery boolean)
    LANGUAGE plpgsql
    SET enable_seqscan TO 'off'
    SET enable_bitmapscan TO 'off'
    SET enable_nestloop TO 'off'
    SET enable_mergejoin TO 'off'
    SET jit TO 'off'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
#variable_conflict use_column
DECLARE
    v_lo   BIGINT;
    v_hi   BIGINT;
    v_bids BIGINT[];
BEGIN
    SELECT min(u.id), max(u.id) INTO v_lo, v_hi
      FROM unnest(p_ids, p_attempts) AS u(id, att)
     WHERE u.att IS NULL OR u.att = 1;
    IF v_lo IS NULL THEN
        RETURN;
    END IF;
    SELECT array_agg(x.batch_id) INTO v_bids
      FROM (SELECT b.batch_id FROM lease_batches b
             WHERE b.owner = p_owner AND b.group_id = p_group AND b.state = 'leased'
               AND b.lo_id <= v_hi AND b.hi_id >= v_lo
             ORDER BY b.batch_id
               FOR UPDATE) x;
    IF v_bids IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT b.batch_id, s.slot::INT, u.ord::INT, b.recovery
      FROM lease_batches b
     CROSS JOIN LATERAL unnest(b.ids) WITH ORDINALITY AS s(id, slot)
      JOIN unnest(p_ids, p_attempts) WITH ORDINALITY AS u(id, att, ord) ON u.id = s.id
     WHERE b.batch_id = ANY (v_bids) AND (u.att IS NULL OR u.att = 1)
       AND get_bit(b.done, s.slot::INT - 1) = 0;
END;
$$;


--
-- Name: mailroom_batch_record(bigint[], integer[], boolean[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.mailroom_batch_record(p_batches bigint[], p_slots integer[], p_kept boolean[]) RETURNS void
    LANGUAGE plpgsql
    SET enable_seqscan TO 'off'
    SET enable_bitmapscan TO 'off'
    AS $$
DECLARE
    r RECORD;
BEGIN
    FOR r IN SELECT x.b, array_agg(x.s) AS slots, array_agg(x.s) FILTER (WHERE x.k) AS kept
               FROM unnest(p_batches, p_slots, p_kept) AS x(b, s, k) GROUP BY x.b
    LOOP
        UPDATE lease_batches b
           SET done = CASE WHEN b.acked + cardinality(r.slots) >= length(b.done)
                           THEN repeat('1', length(b.done))::VARBIT
                           ELSE b.done | mailroom_bits(length(b.done), r.slots) END,
               kept = CASE WHEN r.kept IS NULL THEN b.kept
                           ELSE b.kept | mailroom_bits(length(b.done), r.kept) END,
               acked = b.acked + cardinality(r.slots),
               state = CASE WHEN b.acked + cardinality(r.slots) >= length(b.done) THEN 'done'
                            ELSE 'leased' END,
               updated_at = now()
         WHERE b.batch_id = r.b;
    END LOOP;
END;
$$;


--
-- Name: mailroom_batch_unpack(integer, bigint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.mailroom_batch_unpack(p_group integer, p_id bigint) RETURNS boolean
    LANGUAGE plpgsql
    SET enable_seqscan TO 'off'
    SET enable_bitmapscan TO 'off'
    AS $$
DECLARE
    b      RECORD;
    v_slot INT;
BEGIN
    FOR b IN SELECT x.batch_id, x.owner, x.due_at, x.holder_left, x.recovery, x.ids, x.done
               FROM lease_batches x
              WHERE int8range(x.lo_id, x.hi_id, '[]') @> p_id AND x.group_id = p_group
                AND x.state = 'leased'
                FOR UPDATE
    LOOP
        v_slot := array_position(b.ids, p_id);
        CONTINUE WHEN v_slot IS NULL OR get_bit(b.done, v_slot - 1) = 1;
        PERFORM mailroom_batch_record(ARRAY[b.batch_id], ARRAY[v_slot], ARRAY[true]);
        INSERT INTO deliveries (group_id, token_id, state, attempts, owner, due_at, holder_left,
                                recovery)
        VALUES (p_group, p_id, 'leased', 1, b.owner, b.due_at, b.holder_left, b.recovery);
        RETURN true;
    END LOOP;
    RETURN false;
END;
$$;


--
-- Name: mailroom_bits(integer, integer[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.mailroom_bits(p_n integer, p_slots integer[]) RETURNS bit varying
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT coalesce((SELECT (string_agg(repeat('0', x.s - x.prev - 1) || '1', '' ORDER BY x.s)
                             || repeat('0', p_n - max(x.s)))::VARBIT
                       FROM (SELECT s, coalesce(lag(s) OVER (ORDER BY s), 0) AS prev
                               FROM unnest(p_slots) AS s) x),
                    repeat('0', p_n)::VARBIT);
$$;


--
-- Name: mailroom_budget_grant(text, text, integer, boolean, bigint, integer, bigint, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.mailroom_budget_grant(p_group text, p_holder text, p_emails integer, p_recovery boolean, p_price bigint, p_lease_ms integer, p_default_budget bigint, p_default_reserve integer) RETURNS TABLE(grant_id bigint, emails integer, expires_at timestamp with time zone, retry_after_ms bigint, exhausted boolean, pace_per_second double precision)
    LANGUAGE plpgsql
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


--
-- Name: mailroom_budget_handed(text, text, text, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.mailroom_budget_handed(p_group text, p_owner text, p_holder text, p_n integer) RETURNS void
    LANGUAGE sql
    AS $$
    INSERT INTO budget_subscriptions AS s (group_id, owner, holder, handed)
    SELECT g.id, p_owner, p_holder, p_n FROM consumer_groups g WHERE g.name = p_group
    ON CONFLICT (group_id, owner) DO UPDATE
       SET handed = s.handed + EXCLUDED.handed, updated_at = now();
$$;


--
-- Name: mailroom_budget_refund(integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.mailroom_budget_refund(p_margin_ms integer) RETURNS TABLE(group_name text, holder text, emails bigint)
    LANGUAGE plpgsql
    AS $$
#variable_conflict use_column
DECLARE
    h        RECORD;
    gr       RECORD;
    v_cutoff TIMESTAMPTZ := now() - make_interval(secs => greatest(p_margin_ms, 0) / 1000.0);
    v_left   BIGINT;
    v_n      INT;
BEGIN
    FOR h IN
        -- A linked holder whose newest grant expired before the cut-off (one index probe:
        -- max() of budget_grants_holder_idx's last column) and with something to give back.
        -- The lateral aggregate runs per holder, so the planner cannot turn it into a scan of
        -- every grant; the CASE sums a holder's grants only after its probe (a qual on l
        -- alone could be evaluated first, for every holder).
        SELECT l.group_id, l.holder
          FROM (SELECT DISTINCT s.group_id, s.holder FROM budget_subscriptions s) l
         CROSS JOIN LATERAL (SELECT max(bg.expires_at) AS newest FROM budget_grants bg
                              WHERE bg.group_id = l.group_id AND bg.holder = l.holder) n
         WHERE CASE WHEN n.newest < v_cutoff
                    THEN mailroom_budget_unspent(l.group_id, l.holder) > 0
                    ELSE false END
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
        CONTINUE WHEN EXISTS (SELECT 1 FROM budget_subscriptions s
                                JOIN lease_batches b ON b.owner = s.owner
                                                    AND b.group_id = s.group_id
                               WHERE s.group_id = h.group_id AND s.holder = h.holder
                                 AND b.state = 'leased' AND b.due_at > now());
        v_left := mailroom_budget_unspent(h.group_id, h.holder);  -- 0015's figure, under the lock
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


--
-- Name: mailroom_budget_return(text, text, bigint, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.mailroom_budget_return(p_group text, p_holder text, p_grant bigint, p_emails integer) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    g budget_grants%ROWTYPE;
    v_n INT;
BEGIN
    SELECT bg.* INTO g FROM budget_grants bg JOIN consumer_groups c ON c.id = bg.group_id
     WHERE bg.id = p_grant AND c.name = p_group AND bg.holder = p_holder
       FOR UPDATE OF bg;
    IF NOT FOUND OR g.refunded THEN RETURN 0; END IF;
    v_n := least(greatest(p_emails, 0), g.emails - g.returned_emails);
    IF v_n = 0 THEN RETURN 0; END IF;
    UPDATE budget_grants SET returned_emails = returned_emails + v_n WHERE id = g.id;
    UPDATE budget_months SET returned_micros = returned_micros + v_n * g.price_micros
     WHERE group_id = g.group_id AND month = g.month;
    RETURN v_n;
END;
$$;


--
-- Name: mailroom_budget_settled(text, text, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.mailroom_budget_settled(p_group text, p_owner text, p_n integer) RETURNS void
    LANGUAGE sql
    AS $$
    UPDATE budget_subscriptions s SET settled_unsent = s.settled_unsent + p_n, updated_at = now()
      FROM consumer_groups g
     WHERE g.name = p_group AND s.group_id = g.id AND s.owner = p_owner;
$$;


--
-- Name: mailroom_budget_state(integer, bigint, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.mailroom_budget_state(p_gid integer, p_default_budget bigint, p_default_reserve integer, OUT budget_micros bigint, OUT reserve_percent integer, OUT burst integer, OUT committed_micros bigint, OUT spent_micros bigint, OUT sent bigint, OUT granted_micros bigint, OUT returned_micros bigint, OUT month date, OUT seconds_left double precision) RETURNS record
    LANGUAGE sql STABLE
    AS $$
    WITH m AS (SELECT date_trunc('month', now() AT TIME ZONE 'UTC')::DATE AS month)
    SELECT coalesce(b.monthly_budget_micros, p_default_budget),
           coalesce(b.recovery_reserve_percent, p_default_reserve),
           coalesce(b.burst, 10),
           greatest(coalesce(bm.granted_micros - bm.returned_micros, 0),
                    coalesce(u.cost_micros, 0)),
           coalesce(u.cost_micros, 0), coalesce(u.sent, 0),
           coalesce(bm.granted_micros, 0), coalesce(bm.returned_micros, 0),
           m.month,
           greatest(1e-3, EXTRACT(EPOCH FROM ((m.month + INTERVAL '1 month') AT TIME ZONE 'UTC')
                                             - now())::DOUBLE PRECISION)
      FROM m
      LEFT JOIN group_budgets b ON b.group_id = p_gid
      LEFT JOIN budget_months bm ON bm.group_id = p_gid AND bm.month = m.month
      LEFT JOIN group_usage u ON u.group_id = p_gid AND u.month = m.month;
$$;


--
-- Name: mailroom_budget_unspent(integer, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.mailroom_budget_unspent(p_gid integer, p_holder text) RETURNS bigint
    LANGUAGE sql STABLE
    AS $$
    SELECT (SELECT coalesce(sum(bg.emails - bg.returned_emails), 0)
              FROM budget_grants bg
             WHERE bg.group_id = p_gid AND bg.holder = p_holder)
         - (SELECT coalesce(sum(greatest(s.handed - s.settled_unsent, 0)), 0)
              FROM budget_subscriptions s
             WHERE s.group_id = p_gid AND s.holder = p_holder);
$$;


--
-- Name: mailroom_compact_budget_grants(bigint, timestamp with time zone, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.mailroom_compact_budget_grants(p_after bigint, p_before timestamp with time zone, p_batch integer) RETURNS TABLE(pruned bigint, last_id bigint, more boolean)
    LANGUAGE plpgsql
    SET enable_seqscan TO 'off'
    SET enable_bitmapscan TO 'off'
    AS $$
DECLARE
    k        RECORD;
    v_seen   INT;
    v_last   BIGINT;
    v_newest TIMESTAMPTZ;
    v_n      BIGINT := 0;
BEGIN
    SELECT count(*), max(w.id), max(w.expires_at)
      INTO v_seen, v_last, v_newest
      FROM (SELECT g.id, g.expires_at FROM budget_grants g
             WHERE g.id > p_after ORDER BY g.id LIMIT p_batch) w;
    FOR k IN
        WITH locked AS (
            SELECT g.id, g.group_id, g.holder, g.month, g.price_micros, g.recovery, g.emails,
                   g.returned_emails, g.created_at, g.expires_at
              FROM budget_grants g
             WHERE g.id > p_after AND g.id <= coalesce(v_last, p_after)
               AND NOT g.refunded AND g.expires_at < p_before
               FOR UPDATE SKIP LOCKED
        )
        SELECT max(l.id) AS keep, array_agg(l.id) AS ids, sum(l.emails) AS emails,
               sum(l.returned_emails) AS returned, min(l.created_at) AS created,
               max(l.expires_at) AS expires
          FROM locked l
         GROUP BY l.group_id, l.holder, l.month, l.price_micros, l.recovery
        HAVING count(*) > 1 AND sum(l.emails) <= 2147483647
    LOOP
        DELETE FROM budget_grants g WHERE g.id = ANY (k.ids) AND g.id <> k.keep;
        UPDATE budget_grants g
           SET emails = k.emails, returned_emails = k.returned, created_at = k.created,
               expires_at = k.expires
         WHERE g.id = k.keep;
        v_n := v_n + cardinality(k.ids) - 1;
    END LOOP;
    RETURN QUERY SELECT v_n, coalesce(v_last, p_after),
                        v_seen = p_batch AND (v_n > 0 OR v_newest < p_before);
END;
$$;


--
-- Name: mailroom_compact_delivery_counts(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.mailroom_compact_delivery_counts() RETURNS bigint
    LANGUAGE sql
    AS $$
    WITH del AS (
        DELETE FROM delivery_counts RETURNING group_id, state, n
    ), ins AS (
        INSERT INTO delivery_counts (group_id, state, n)
        SELECT group_id, state, sum(n) FROM del GROUP BY group_id, state HAVING sum(n) <> 0
        RETURNING 1
    )
    SELECT count(*) FROM ins;
$$;


--
-- Name: mailroom_compact_reputation(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.mailroom_compact_reputation() RETURNS bigint
    LANGUAGE sql
    AS $$
    WITH del AS (
        DELETE FROM reputation_hourly
        RETURNING group_id, hour, sent, delivered, bounced, complained
    ), ins AS (
        INSERT INTO reputation_hourly (group_id, hour, sent, delivered, bounced, complained)
        SELECT group_id, hour, sum(sent), sum(delivered), sum(bounced), sum(complained)
          FROM del
         WHERE hour > now() - interval '91 days'
         GROUP BY group_id, hour
        RETURNING 1
    )
    SELECT count(*) FROM ins;
$$;


--
-- Name: mailroom_dequeue(text, integer, text, integer, boolean); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.mailroom_dequeue(p_group text, p_limit integer, p_owner text, p_lease_ms integer, p_recoveries_only boolean DEFAULT false) RETURNS TABLE(job_id bigint, action public.token_action, email text, login text, secret bytea, code text, expires_at bigint, account_id bigint, attempt integer, failures integer, created_at bigint, locale text)
    LANGUAGE plpgsql
    SET enable_seqscan TO 'off'
    SET enable_bitmapscan TO 'off'
    SET enable_sort TO 'off'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
#variable_conflict use_column
DECLARE
    g          consumer_groups%ROWTYPE;
    v_due      TIMESTAMPTZ := now() + make_interval(secs => p_lease_ms / 1000.0);
    v_now      BIGINT := EXTRACT(EPOCH FROM now())::BIGINT;
    v_left     INT := p_limit;
    v_class    token_action;
    v_rec      BOOLEAN;
    v_prev     PG_SNAPSHOT;
    v_cur      PG_SNAPSHOT;
    v_pos_txid XID8;
    v_pos_id   BIGINT;
    v_opened   BOOLEAN;
    v_ids      BIGINT[];
    v_tids     TID[];
    v_states   delivery_state[];
    v_whys     TEXT[];
    v_txids    XID8[];
    v_actions  token_action[];
    v_emails   TEXT[];
    v_logins   TEXT[];
    v_secrets  BYTEA[];
    v_codes    TEXT[];
    v_expires  BIGINT[];
    v_accounts BIGINT[];
    v_created  BIGINT[];
    v_locales  TEXT[];
    v_ok       BOOLEAN[];
    v_skip     TEXT[];
    v_reasons  TEXT[];
    v_count    INT;
    v_returned INT;
BEGIN
    SELECT * INTO g FROM consumer_groups WHERE name = p_group FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown consumer group "%"', p_group USING ERRCODE = 'no_data_found';
    END IF;
    IF g.rec_prev_snapshot IS NULL THEN
        -- A group created since 0010: the recoveries' cursor starts where the activations' is.
        g.rec_prev_snapshot := g.prev_snapshot;
        g.rec_cur_snapshot := g.cur_snapshot;
        g.rec_pos_txid := g.pos_txid;
        g.rec_pos_id := g.pos_id;
    END IF;

    FOREACH v_class IN ARRAY ARRAY['password_recovery', 'activation']::token_action[] LOOP
        EXIT WHEN v_left <= 0;
        v_rec := v_class = 'password_recovery';
        -- The recovery lane: the activations' pass (and cursor) is left untouched.
        EXIT WHEN p_recoveries_only AND NOT v_rec;

        -- 0. Batches of this class whose lease ran out: their jobs without an outcome become
        --    per-job rows as their lease left them ('leased', the batch's owner, lease end and
        --    holder_left, attempt 1), due at once: step 1 hands them out again like any other
        --    lease that ran out (attempt 2, lost_leases + 1 unless the holder left). A batch an
        --    acknowledgement holds right now is skipped and taken at a later call.
        WITH x AS (
            SELECT b.batch_id FROM lease_batches b
             WHERE b.group_id = g.id AND b.state = 'leased' AND b.due_at <= now()
               AND b.recovery = v_rec
             -- The order makes the plan lease_batches_due_idx's range even without
             -- statistics (as the due-again scans of deliveries below).
             ORDER BY b.due_at
               FOR UPDATE SKIP LOCKED
        ), e AS (
            UPDATE lease_batches b SET state = 'expired', updated_at = now()
              FROM x
             WHERE b.batch_id = x.batch_id
            RETURNING b.group_id, b.owner, b.due_at, b.holder_left, b.recovery, b.ids, b.done
        )
        INSERT INTO deliveries (group_id, token_id, state, attempts, owner, due_at, holder_left,
                                recovery)
        SELECT e.group_id, u.id, 'leased', 1, e.owner, e.due_at, e.holder_left, e.recovery
          FROM e CROSS JOIN LATERAL unnest(e.ids) WITH ORDINALITY AS u(id, slot)
         WHERE get_bit(e.done, u.slot::INT - 1) = 0
        ON CONFLICT DO NOTHING;

        -- 1. Jobs of this class due again (locked here, leased again below).
        IF v_rec THEN
            SELECT array_agg(x.ctid) INTO v_tids
              FROM (SELECT d.ctid FROM deliveries d
                     WHERE d.group_id = g.id AND d.state IN ('leased', 'retry') AND d.recovery
                       AND d.due_at <= now()
                     ORDER BY d.due_at LIMIT v_left
                       FOR UPDATE SKIP LOCKED) x;
        ELSE
            SELECT array_agg(x.ctid) INTO v_tids
              FROM (SELECT d.ctid FROM deliveries d
                     WHERE d.group_id = g.id AND d.state IN ('leased', 'retry') AND NOT d.recovery
                       AND d.due_at <= now()
                     ORDER BY d.due_at LIMIT v_left
                       FOR UPDATE SKIP LOCKED) x;
        END IF;
        v_ids := NULL;
        IF v_tids IS NOT NULL THEN
            -- The rows are locked by this transaction since the statement above: their
            -- ctids stay theirs, and a TID scan is the only plan.
            WITH upd AS (
                UPDATE deliveries d
                   SET lost_leases = d.lost_leases + (d.state = 'leased' AND NOT d.holder_left)::INT,
                       attempts = d.attempts + 1, state = 'leased', owner = p_owner,
                       due_at = v_due, holder_left = false, updated_at = now()
                 WHERE d.ctid = ANY (v_tids)
                RETURNING d.token_id
            )
            SELECT array_agg(token_id) INTO v_ids FROM upd;
        END IF;

        IF v_ids IS NOT NULL THEN
            -- Finish those that must not be sent any more: read by one probe per job and
            -- table, then written by ctid (the rows are still locked by this transaction), one
            -- statement per finished job (few: most jobs due again are sent again).
            SELECT array_agg(x.ctid), array_agg(x.st), array_agg(x.why)
              INTO v_tids, v_states, v_whys
              FROM (SELECT d2.ctid,
                           CASE WHEN d2.lost_leases >= g.max_lost_leases THEN 'failed'
                                WHEN t.id IS NULL THEN 'cancelled'
                                WHEN t.superseded_by IS NOT NULL THEN 'superseded'
                                WHEN t.rate_limited THEN 'rate_limited'
                                WHEN t.expires_at <= v_now THEN 'expired'
                                WHEN NOT mailroom_token_sendable(ROW(t.*)::tokens, a.status, v_now)
                                     THEN 'cancelled'
                                WHEN sp.address IS NOT NULL THEN 'suppressed'
                           END::delivery_state AS st,
                           CASE WHEN d2.lost_leases >= g.max_lost_leases
                                     THEN format('lease ran out %s times without an outcome',
                                                 d2.lost_leases)
                                WHEN t.id IS NULL THEN 'token deleted'
                                WHEN t.superseded_by IS NOT NULL OR t.rate_limited
                                     THEN t.suppressed_reason
                                WHEN t.expires_at <= v_now THEN 'token expired before delivery'
                                WHEN NOT mailroom_token_sendable(ROW(t.*)::tokens, a.status, v_now)
                                     THEN 'token consumed or account status changed'
                                ELSE sp.why
                           END AS why
                      FROM unnest(v_ids) AS u(id)
                     CROSS JOIN LATERAL (SELECT d2.ctid, d2.token_id, d2.lost_leases
                                           FROM deliveries d2
                                          WHERE d2.group_id = g.id AND d2.token_id = u.id
                                         OFFSET 0) d2
                      LEFT JOIN LATERAL (SELECT t.* FROM tokens t WHERE t.id = d2.token_id
                                         OFFSET 0) t ON true
                      LEFT JOIN LATERAL (SELECT a.status, a.email FROM accounts a
                                          WHERE a.id = t.account OFFSET 0) a ON true
                      LEFT JOIN LATERAL (SELECT * FROM mailroom_suppression(a.email) OFFSET 0) sp
                             ON true) x
             WHERE x.st IS NOT NULL;
            FOR i IN 1 .. coalesce(array_length(v_tids, 1), 0) LOOP
                UPDATE deliveries d
                   SET state = v_states[i], reason = v_whys[i], owner = NULL, due_at = NULL,
                       updated_at = now()
                 WHERE d.ctid = v_tids[i];
            END LOOP;

            RETURN QUERY
            SELECT t.id, t.action, a.email::TEXT, a.login::TEXT, t.secret, t.code::TEXT,
                   t.expires_at, t.account, d.attempts, d.failures, t.created_at, a.locale
              FROM unnest(v_ids) AS u(id)
             CROSS JOIN LATERAL (SELECT d.attempts, d.failures, d.state FROM deliveries d
                                  WHERE d.group_id = g.id AND d.token_id = u.id OFFSET 0) d
             CROSS JOIN LATERAL (SELECT t.* FROM tokens t WHERE t.id = u.id OFFSET 0) t
             CROSS JOIN LATERAL (SELECT a.email, a.login, a.locale FROM accounts a
                                  WHERE a.id = t.account OFFSET 0) a
             WHERE d.state = 'leased';
            GET DIAGNOSTICS v_returned = ROW_COUNT;
            v_left := v_left - v_returned;
        END IF;

        -- 2. New tokens of this class, window by window, on this class's cursor.
        IF v_rec THEN
            v_prev := g.rec_prev_snapshot; v_cur := g.rec_cur_snapshot;
            v_pos_txid := g.rec_pos_txid; v_pos_id := g.rec_pos_id;
        ELSE
            v_prev := g.prev_snapshot; v_cur := g.cur_snapshot;
            v_pos_txid := g.pos_txid; v_pos_id := g.pos_id;
        END IF;
        v_opened := FALSE;
        WHILE v_left > 0 LOOP
            IF v_cur IS NULL THEN
                EXIT WHEN v_opened;  -- at most one fresh window per cursor and call
                v_cur := pg_current_snapshot();
                v_pos_txid := pg_snapshot_xmin(v_prev);
                v_pos_id := 0;
                v_opened := TRUE;
            END IF;

            -- One pass over the window (index range scan on (action, txid, id)) collects
            -- everything the jobs need; the lease rows are written from it without looking the
            -- tokens up again.
            SELECT array_agg(w.id), array_agg(w.txid), array_agg(w.action), array_agg(w.email),
                   array_agg(w.login), array_agg(w.secret), array_agg(w.code),
                   array_agg(w.expires_at), array_agg(w.account), array_agg(w.created_at),
                   array_agg(w.ok), array_agg(w.skip), array_agg(w.locale),
                   array_agg(w.suppressed_reason)
              INTO v_ids, v_txids, v_actions, v_emails, v_logins, v_secrets, v_codes, v_expires,
                   v_accounts, v_created, v_ok, v_skip, v_locales, v_reasons
              FROM (SELECT t.id, t.txid, t.action, a.email::TEXT AS email, a.login::TEXT AS login,
                           t.secret, t.code::TEXT AS code, t.expires_at, t.account, t.created_at,
                           a.locale, s.ok,
                           CASE WHEN t.superseded_by IS NOT NULL OR t.rate_limited
                                     THEN t.suppressed_reason
                                ELSE sp.why END AS suppressed_reason,
                           CASE WHEN s.ok THEN NULL
                                WHEN t.superseded_by IS NOT NULL THEN 'superseded'
                                WHEN t.rate_limited THEN 'rate_limited'
                                WHEN t.expires_at <= v_now THEN 'expired'
                                WHEN t.consumed_at IS NOT NULL THEN 'consumed'
                                WHEN NOT s.sendable THEN a.status::TEXT
                                ELSE 'suppressed' END AS skip
                      FROM tokens t
                     CROSS JOIN LATERAL (SELECT a.email, a.login, a.locale, a.status
                                           FROM accounts a WHERE a.id = t.account OFFSET 0) a
                      LEFT JOIN LATERAL (SELECT * FROM mailroom_suppression(a.email) OFFSET 0) sp
                             ON true
                     CROSS JOIN LATERAL (SELECT mailroom_token_sendable(t, a.status, v_now)
                                                AS sendable) s0
                     CROSS JOIN LATERAL (SELECT s0.sendable AND t.superseded_by IS NULL
                                               AND NOT t.rate_limited AND sp.address IS NULL AS ok,
                                               s0.sendable) s
                     -- The class and the cursor as the range's two ends (see 1. above):
                     -- t.action = v_class, (t.txid, t.id) > the cursor, t.txid < xmax.
                     WHERE (t.action, t.txid, t.id) > (v_class, v_pos_txid, v_pos_id)
                       AND (t.action, t.txid) < (v_class, pg_snapshot_xmax(v_cur))
                       AND pg_visible_in_snapshot(t.txid, v_cur)
                       AND NOT pg_visible_in_snapshot(t.txid, v_prev)
                     ORDER BY t.action, t.txid, t.id
                     LIMIT v_left) w;
            v_count := coalesce(array_length(v_ids, 1), 0);

            IF v_count > 0 THEN
                RETURN QUERY
                WITH r AS (
                    SELECT * FROM unnest(v_ids, v_actions, v_emails, v_logins, v_secrets, v_codes,
                                         v_expires, v_accounts, v_created, v_ok, v_locales)
                               AS r(id, action, email, login, secret, code, expires_at, account,
                                    created_at, ok, locale)
                     WHERE r.ok
                ), ins AS (
                    -- One lease row for the jobs of this window, one bit each.
                    INSERT INTO lease_batches (group_id, owner, recovery, due_at, ids, done,
                                               kept, lo_id, hi_id)
                    SELECT g.id, p_owner, v_rec, v_due, array_agg(r.id),
                           repeat('0', count(*)::INT)::VARBIT, repeat('0', count(*)::INT)::VARBIT,
                           min(r.id), max(r.id)
                      FROM r
                    HAVING count(*) > 0
                )
                SELECT r.id, r.action, r.email, r.login, r.secret, r.code, r.expires_at,
                       r.account, 1, 0, r.created_at, r.locale
                  FROM r;
                GET DIAGNOSTICS v_returned = ROW_COUNT;

                -- Tokens not to send are recorded too, so that every token of the group ends
                -- with an outcome and a reason (seed 001's filters: expired, consumed, wrong
                -- status; the abuse limits decided when the token was inserted; the
                -- suppression list).
                IF FALSE = ANY (v_ok) THEN
                    INSERT INTO deliveries (group_id, token_id, state, attempts, reason, recovery)
                    SELECT g.id, x.id,
                           (CASE WHEN x.why IN ('expired', 'superseded', 'rate_limited',
                                                'suppressed')
                                      THEN x.why
                                 ELSE 'cancelled' END)::delivery_state,
                           0,
                           CASE x.why WHEN 'expired' THEN 'token expired before delivery'
                                      WHEN 'consumed' THEN 'token consumed before delivery'
                                      WHEN 'superseded' THEN x.reason
                                      WHEN 'rate_limited' THEN x.reason
                                      WHEN 'suppressed' THEN x.reason
                                      ELSE format('%s token for an account that is %s',
                                                  x.action, x.why)
                           END,
                           v_rec
                      FROM unnest(v_ids, v_skip, v_actions, v_reasons) AS x(id, why, action, reason)
                     WHERE x.why IS NOT NULL
                    ON CONFLICT DO NOTHING;
                END IF;
            ELSE
                v_returned := 0;
            END IF;

            IF v_count < v_left THEN
                -- Window exhausted: its upper snapshot becomes the lower bound.
                v_prev := v_cur;
                v_cur := NULL;
                v_pos_txid := NULL;
                v_pos_id := NULL;
            ELSE
                v_pos_txid := v_txids[v_count];
                v_pos_id := v_ids[v_count];
            END IF;
            v_left := v_left - v_returned;
        END LOOP;

        IF v_rec THEN
            g.rec_prev_snapshot := v_prev; g.rec_cur_snapshot := v_cur;
            g.rec_pos_txid := v_pos_txid; g.rec_pos_id := v_pos_id;
        ELSE
            g.prev_snapshot := v_prev; g.cur_snapshot := v_cur;
            g.pos_txid := v_pos_txid; g.pos_id := v_pos_id;
        END IF;
    END LOOP;

    UPDATE consumer_groups
       SET prev_snapshot = g.prev_snapshot, cur_snapshot = g.cur_snapshot,
           pos_txid = g.pos_txid, pos_id = g.pos_id,
           rec_prev_snapshot = g.rec_prev_snapshot, rec_cur_snapshot = g.rec_cur_snapshot,
           rec_pos_txid = g.rec_pos_txid, rec_pos_id = g.rec_pos_id
     WHERE id = g.id;
END;
$$;


--
-- Name: mailroom_ensure_group(text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.mailroom_ensure_group(p_group text) RETURNS void
    LANGUAGE sql
    AS $$
    INSERT INTO consumer_groups (name, prev_snapshot) VALUES (p_group, pg_current_snapshot())
    ON CONFLICT (name) DO NOTHING;
$$;


--
-- Name: mailroom_ensure_group(text, boolean); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.mailroom_ensure_group(p_group text, p_from_earliest boolean) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_from XID8;
    v_snapshot PG_SNAPSHOT := pg_current_snapshot();
BEGIN
    IF EXISTS (SELECT 1 FROM consumer_groups WHERE name = p_group) THEN
        RETURN;
    END IF;
    IF p_from_earliest THEN
        SELECT least(pg_snapshot_xmin(v_snapshot),
                     (SELECT t.txid FROM tokens t
                       WHERE t.expires_at > EXTRACT(EPOCH FROM now())::BIGINT
                       ORDER BY t.txid LIMIT 1))
          INTO v_from;
        v_snapshot := format('%s:%s:', v_from, v_from)::PG_SNAPSHOT;
    END IF;
    INSERT INTO consumer_groups (name, prev_snapshot) VALUES (p_group, v_snapshot)
    ON CONFLICT (name) DO NOTHING;
END;
$$;


--
-- Name: mailroom_finished_state(public.delivery_state); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.mailroom_finished_state(s public.delivery_state) RETURNS boolean
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT s::TEXT NOT IN ('leased', 'retry');
$$;


--
-- Name: mailroom_holder_left(text, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.mailroom_holder_left(p_group text, p_owner text) RETURNS void
    LANGUAGE sql
    AS $$
    UPDATE deliveries d SET holder_left = true
      FROM consumer_groups g
     WHERE g.name = p_group AND d.group_id = g.id AND d.owner = p_owner AND d.state = 'leased';
    UPDATE lease_batches b SET holder_left = true
      FROM consumer_groups g
     WHERE g.name = p_group AND b.group_id = g.id AND b.owner = p_owner AND b.state = 'leased';
$$;


--
-- Name: mailroom_prune_budget_grants(bigint, timestamp with time zone, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.mailroom_prune_budget_grants(p_after bigint, p_before timestamp with time zone, p_batch integer) RETURNS TABLE(pruned bigint, last_id bigint, more boolean)
    LANGUAGE plpgsql
    SET enable_seqscan TO 'off'
    SET enable_bitmapscan TO 'off'
    AS $$
DECLARE
    v_ids    BIGINT[];
    v_seen   INT;
    v_last   BIGINT;
    v_newest TIMESTAMPTZ;
    v_n      BIGINT;
BEGIN
    SELECT count(*), max(w.id), max(w.expires_at)
      INTO v_seen, v_last, v_newest
      FROM (SELECT g.id, g.expires_at FROM budget_grants g
             WHERE g.id > p_after ORDER BY g.id LIMIT p_batch) w;
    -- The holder-wide conditions are decided once per holder of the window, not per row.
    WITH w AS (
        SELECT g.id, g.group_id, g.holder, g.refunded, g.emails, g.returned_emails
          FROM budget_grants g
         WHERE g.id > p_after AND g.id <= coalesce(v_last, p_after) AND g.expires_at < p_before
    ), h AS (
        SELECT DISTINCT w.group_id, w.holder FROM w
    ), gone AS (
        SELECT h.group_id, h.holder
          FROM h
         WHERE NOT EXISTS (SELECT 1 FROM budget_subscriptions s
                            WHERE s.group_id = h.group_id AND s.holder = h.holder)
            OR ((SELECT max(g.expires_at) FROM budget_grants g
                  WHERE g.group_id = h.group_id AND g.holder = h.holder) < p_before
                AND mailroom_budget_unspent(h.group_id, h.holder) <= 0)
    )
    SELECT array_agg(w.id) INTO v_ids
      FROM w
     WHERE w.refunded OR w.returned_emails = w.emails
        OR EXISTS (SELECT 1 FROM gone WHERE gone.group_id = w.group_id
                                        AND gone.holder = w.holder);
    v_n := 0;
    IF v_ids IS NOT NULL THEN
        -- Deleting any grant row can only lower a refund (see 1.): the conditions above, read
        -- without locks, decide what is worth keeping, not what is safe.
        WITH victims AS (
            SELECT g.id FROM budget_grants g
             WHERE g.id = ANY (v_ids) AND g.expires_at < p_before
               FOR UPDATE SKIP LOCKED
        ), del AS (
            DELETE FROM budget_grants g USING victims v WHERE g.id = v.id
            RETURNING 1
        )
        SELECT count(*) INTO v_n FROM del;
    END IF;
    RETURN QUERY SELECT v_n, coalesce(v_last, p_after),
                        v_seen = p_batch AND (v_n > 0 OR v_newest < p_before);
END;
$$;


--
-- Name: mailroom_prune_budget_subscriptions(timestamp with time zone, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.mailroom_prune_budget_subscriptions(p_before timestamp with time zone, p_batch integer) RETURNS TABLE(pruned bigint, last_id bigint, more boolean)
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_n BIGINT;
BEGIN
    WITH victims AS (
        SELECT s.group_id, s.owner FROM budget_subscriptions s
         WHERE s.updated_at < p_before
           AND NOT EXISTS (SELECT 1 FROM budget_grants g
                            WHERE g.group_id = s.group_id AND g.holder = s.holder)
           AND NOT EXISTS (SELECT 1 FROM deliveries d
                            WHERE d.owner = s.owner AND d.state = 'leased'
                              AND d.group_id = s.group_id)
           AND NOT EXISTS (SELECT 1 FROM lease_batches b
                            WHERE b.owner = s.owner AND b.state = 'leased'
                              AND b.group_id = s.group_id)
         LIMIT p_batch
           FOR UPDATE SKIP LOCKED
    ), del AS (
        DELETE FROM budget_subscriptions s USING victims v
         WHERE s.group_id = v.group_id AND s.owner = v.owner
        RETURNING 1
    )
    SELECT count(*) INTO v_n FROM del;
    RETURN QUERY SELECT v_n, 0::BIGINT, v_n = p_batch;
END;
$$;


--
-- Name: mailroom_prune_deliveries(integer, bigint, timestamp with time zone, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.mailroom_prune_deliveries(p_group_id integer, p_after bigint, p_before timestamp with time zone, p_batch integer) RETURNS TABLE(pruned bigint, last_id bigint, more boolean)
    LANGUAGE plpgsql
    SET enable_seqscan TO 'off'
    SET enable_bitmapscan TO 'off'
    AS $$
DECLARE
    v_ids    BIGINT[];
    v_seen   INT;
    v_last   BIGINT;
    v_newest TIMESTAMPTZ;
    v_n      BIGINT;
BEGIN
    SELECT array_agg(w.token_id) FILTER (WHERE mailroom_finished_state(w.state)
                                           AND w.updated_at < p_before),
           count(*), max(w.token_id), max(w.updated_at)
      INTO v_ids, v_seen, v_last, v_newest
      FROM (SELECT d.token_id, d.state, d.updated_at FROM deliveries d
             WHERE d.group_id = p_group_id AND d.token_id > p_after
             ORDER BY d.token_id LIMIT p_batch) w;
    v_n := 0;
    IF v_ids IS NOT NULL THEN
        WITH victims AS (
            SELECT d.token_id FROM deliveries d
             WHERE d.group_id = p_group_id AND d.token_id = ANY (v_ids)
               AND mailroom_finished_state(d.state) AND d.updated_at < p_before
               FOR UPDATE SKIP LOCKED
        ), del AS (
            DELETE FROM deliveries d USING victims v
             WHERE d.group_id = p_group_id AND d.token_id = v.token_id
            RETURNING 1
        )
        SELECT count(*) INTO v_n FROM del;
    END IF;
    RETURN QUERY SELECT v_n, coalesce(v_last, p_after),
                        v_seen = p_batch AND (v_n > 0 OR v_newest < p_before);
END;
$$;


--
-- Name: mailroom_prune_lease_batches(bigint, timestamp with time zone, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.mailroom_prune_lease_batches(p_after bigint, p_before timestamp with time zone, p_batch integer) RETURNS TABLE(pruned bigint, last_id bigint, more boolean)
    LANGUAGE plpgsql
    SET enable_seqscan TO 'off'
    SET enable_bitmapscan TO 'off'
    AS $$
DECLARE
    v_ids    BIGINT[];
    v_seen   INT;
    v_last   BIGINT;
    v_newest TIMESTAMPTZ;
    v_n      BIGINT;
BEGIN
    SELECT array_agg(w.batch_id) FILTER (WHERE w.state <> 'leased' AND w.updated_at < p_before),
           count(*), max(w.batch_id), max(w.updated_at)
      INTO v_ids, v_seen, v_last, v_newest
      FROM (SELECT b.batch_id, b.state, b.updated_at FROM lease_batches b
             WHERE b.batch_id > p_after ORDER BY b.batch_id LIMIT p_batch) w;
    v_n := 0;
    IF v_ids IS NOT NULL THEN
        WITH victims AS (
            SELECT b.batch_id FROM lease_batches b
             WHERE b.batch_id = ANY (v_ids) AND b.state <> 'leased' AND b.updated_at < p_before
               FOR UPDATE SKIP LOCKED
        ), del AS (
            DELETE FROM lease_batches b USING victims v WHERE b.batch_id = v.batch_id
            RETURNING 1
        )
        SELECT count(*) INTO v_n FROM del;
    END IF;
    RETURN QUERY SELECT v_n, coalesce(v_last, p_after),
                        v_seen = p_batch AND (v_n > 0 OR v_newest < p_before);
END;
$$;


--
-- Name: mailroom_prune_soft_bounces(integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.mailroom_prune_soft_bounces(p_batch integer) RETURNS TABLE(pruned bigint, last_id bigint, more boolean)
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_n BIGINT;
BEGIN
    WITH victims AS (
        SELECT b.ctid AS row_id FROM soft_bounces b
         WHERE b.bounced_at <= now() - interval '7 days'
         ORDER BY b.bounced_at LIMIT p_batch
           FOR UPDATE SKIP LOCKED
    ), del AS (
        DELETE FROM soft_bounces b USING victims v WHERE b.ctid = v.row_id
        RETURNING 1
    )
    SELECT count(*) INTO v_n FROM del;
    RETURN QUERY SELECT v_n, 0::BIGINT, v_n = p_batch;
END;
$$;


--
-- Name: mailroom_prune_tokens(bigint, bigint, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.mailroom_prune_tokens(p_after bigint, p_before_epoch bigint, p_batch integer) RETURNS TABLE(pruned bigint, last_id bigint, more boolean)
    LANGUAGE plpgsql
    SET enable_seqscan TO 'off'
    SET enable_bitmapscan TO 'off'
    AS $$
DECLARE
    v_cutoff  BIGINT;
    v_ids     BIGINT[];
    v_seen    INT;
    v_last    BIGINT;
    v_n       BIGINT;
BEGIN
    SELECT least(p_before_epoch,
                 EXTRACT(EPOCH FROM now())::BIGINT - s.limit_window_seconds)
      INTO v_cutoff FROM mailroom_settings s;
    SELECT array_agg(w.id) FILTER (WHERE w.created_at < v_cutoff AND w.expires_at < v_cutoff),
           count(*), max(w.id)
      INTO v_ids, v_seen, v_last
      FROM (SELECT t.id, t.created_at, t.expires_at FROM tokens t
             WHERE t.id > p_after ORDER BY t.id LIMIT p_batch) w;
    v_n := 0;
    IF v_ids IS NOT NULL THEN
        WITH victims AS (
            SELECT t.id FROM tokens t
             WHERE t.id = ANY (v_ids)
               AND t.created_at < v_cutoff AND t.expires_at < v_cutoff
               -- A token outlives its batch as it outlives its deliveries rows.
               AND NOT EXISTS (SELECT 1 FROM lease_batches b
                                WHERE int8range(b.lo_id, b.hi_id, '[]') @> t.id
                                  AND t.id = ANY (b.ids))
               AND NOT EXISTS (SELECT 1 FROM consumer_groups g
                                 JOIN deliveries d ON d.group_id = g.id AND d.token_id = t.id)
               FOR UPDATE OF t SKIP LOCKED
        ), del AS (
            DELETE FROM tokens t USING victims v WHERE t.id = v.id
            RETURNING 1
        )
        SELECT count(*) INTO v_n FROM del;
    END IF;
    -- Go on while a window deletes something. Walking on through tokens kept for their
    -- deliveries would make a pass O(tokens) whenever deliveries lag behind.
    RETURN QUERY SELECT v_n, coalesce(v_last, p_after), v_seen = p_batch AND v_n > 0;
END;
$$;


--
-- Name: mailroom_random_code(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.mailroom_random_code() RETURNS character varying
    LANGUAGE plpgsql
    AS $$
DECLARE
    n BIGINT;
BEGIN
    LOOP
        n := ('x' || encode(gen_random_bytes(4), 'hex'))::BIT(32)::BIGINT;
        IF n < 4294900000 THEN
            RETURN lpad((n % 100000)::TEXT, 5, '0');
        END IF;
    END LOOP;
END;
$$;


--
-- Name: mailroom_record_feedback(text, text, text, text, bigint, text[], text, text, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.mailroom_record_feedback(p_sns_id text, p_event text, p_ses_message_id text, p_group text, p_job_id bigint, p_recipients text[], p_bounce_type text, p_detail text, p_soft_limit integer) RETURNS text
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_gid   INT;
    v_tid   BIGINT;
    v_bg    INT;
    v_first BOOLEAN := FALSE;
    v_addr  TEXT;
    v_soft  TEXT[] := '{}';
BEGIN
    INSERT INTO sns_messages (message_id, type) VALUES (p_sns_id, p_event)
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RETURN 'duplicate';
    END IF;
    -- What expired since the last call: an index range, usually empty.
    DELETE FROM sns_messages WHERE received_at < now() - interval '30 days';

    IF p_ses_message_id <> '' THEN
        SELECT d.group_id, d.token_id INTO v_gid, v_tid FROM deliveries d
         WHERE d.provider_message_id = p_ses_message_id
         LIMIT 1;
    END IF;
    IF v_gid IS NULL AND p_group <> '' AND p_job_id > 0 THEN
        SELECT d.group_id, d.token_id INTO v_gid, v_tid
          FROM deliveries d JOIN consumer_groups g ON g.id = d.group_id
         WHERE g.name = p_group AND d.token_id = p_job_id;
        -- A job still leased in a batch has no row of its own yet: it gets one (0021).
        IF v_gid IS NULL THEN
            SELECT g.id INTO v_bg FROM consumer_groups g WHERE g.name = p_group;
            IF v_bg IS NOT NULL AND mailroom_batch_unpack(v_bg, p_job_id) THEN
                v_gid := v_bg;
                v_tid := p_job_id;
            END IF;
        END IF;
    END IF;

    IF v_gid IS NOT NULL THEN
        -- Each kind of event counts once per delivery (SES may report a delivery twice).
        IF p_event = 'Delivery' THEN
            UPDATE deliveries SET delivered_at = now()
             WHERE group_id = v_gid AND token_id = v_tid AND delivered_at IS NULL;
            v_first := FOUND;
            IF v_first THEN PERFORM mailroom_reputation_add(v_gid, 0, 1, 0, 0); END IF;
        ELSIF p_event = 'Bounce' AND p_bounce_type = 'Permanent' THEN
            UPDATE deliveries SET bounced_at = now(), bounce_type = p_bounce_type
             WHERE group_id = v_gid AND token_id = v_tid AND bounced_at IS NULL;
            v_first := FOUND;
            IF v_first THEN PERFORM mailroom_reputation_add(v_gid, 0, 0, 1, 0); END IF;
        ELSIF p_event = 'Bounce' THEN
            UPDATE deliveries SET bounce_type = p_bounce_type
             WHERE group_id = v_gid AND token_id = v_tid AND bounced_at IS NULL;
        ELSIF p_event = 'Complaint' THEN
            UPDATE deliveries SET complained_at = now()
             WHERE group_id = v_gid AND token_id = v_tid AND complained_at IS NULL;
            v_first := FOUND;
            IF v_first THEN PERFORM mailroom_reputation_add(v_gid, 0, 0, 0, 1); END IF;
        ELSIF p_event = 'Reject' THEN
            UPDATE deliveries SET rejected_at = now()
             WHERE group_id = v_gid AND token_id = v_tid AND rejected_at IS NULL;
        END IF;
    END IF;

    IF p_event = 'Bounce' AND p_bounce_type = 'Permanent' THEN
        PERFORM mailroom_suppress_addresses(p_recipients, 'hard_bounce',
                                            'ses bounce: Permanent ' || p_detail);
    ELSIF p_event = 'Bounce' AND p_bounce_type = 'Transient' THEN
        DELETE FROM soft_bounces b
         WHERE b.address IN (SELECT lower(trim(a)) FROM unnest(p_recipients) a)
           AND b.bounced_at <= now() - interval '7 days';
        INSERT INTO soft_bounces (address)
        SELECT DISTINCT lower(trim(a)) FROM unnest(p_recipients) a WHERE trim(a) <> '';
        FOREACH v_addr IN ARRAY p_recipients LOOP
            IF (SELECT count(*) FROM soft_bounces b
                 WHERE b.address = lower(trim(v_addr))
                   AND b.bounced_at > now() - interval '7 days') >= p_soft_limit THEN
                v_soft := v_soft || v_addr;
            END IF;
        END LOOP;
        IF array_length(v_soft, 1) > 0 THEN
            PERFORM mailroom_suppress_addresses(
                v_soft, 'hard_bounce',
                format('ses bounce: %s transient bounces within 7 days %s', p_soft_limit, p_detail));
        END IF;
    ELSIF p_event = 'Complaint' THEN
        PERFORM mailroom_suppress_addresses(p_recipients, 'complaint', 'ses complaint ' || p_detail);
    END IF;

    RETURN CASE WHEN v_gid IS NULL THEN 'unmatched' ELSE 'recorded' END;
END;
$$;


--
-- Name: mailroom_record_sent(text, bigint, bigint[], text[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.mailroom_record_sent(p_group text, p_sent bigint, p_ids bigint[], p_message_ids text[]) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_gid INT;
    v_n   INT := 0;
BEGIN
    SELECT id INTO v_gid FROM consumer_groups WHERE name = p_group;
    IF NOT FOUND OR p_sent <= 0 THEN
        RETURN 0;
    END IF;
    IF coalesce(array_length(p_ids, 1), 0) > 0 THEN
        UPDATE deliveries d SET provider_message_id = u.mid
          FROM unnest(p_ids, p_message_ids) AS u(id, mid)
         WHERE d.group_id = v_gid AND d.token_id = u.id AND d.state = 'sent' AND u.mid <> '';
        GET DIAGNOSTICS v_n = ROW_COUNT;
    END IF;
    PERFORM mailroom_reputation_add(v_gid, p_sent, 0, 0, 0);
    RETURN v_n;
END;
$$;


--
-- Name: mailroom_release(text, text, bigint[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.mailroom_release(p_group text, p_owner text, p_ids bigint[]) RETURNS integer
    LANGUAGE plpgsql
    SET enable_seqscan TO 'off'
    SET enable_bitmapscan TO 'off'
    AS $$
DECLARE
    gid    INT;
    v_ids  BIGINT[];
    v_n    INT;
    v_mb   BIGINT[];
    v_slot INT[];
    v_ord  INT[];
    v_rec  BOOLEAN[];
BEGIN
    SELECT id INTO gid FROM consumer_groups WHERE name = p_group;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    SELECT array_agg(DISTINCT u.id) INTO v_ids FROM unnest(p_ids) AS u(id);
    IF v_ids IS NULL THEN
        RETURN 0;
    END IF;
    UPDATE deliveries d SET due_at = now(), holder_left = true
     WHERE d.group_id = gid AND d.owner = p_owner AND d.token_id = ANY (v_ids)
       AND d.state = 'leased';
    GET DIAGNOSTICS v_n = ROW_COUNT;
    SELECT array_agg(m.batch_id), array_agg(m.slot), array_agg(m.ord), array_agg(m.recovery)
      INTO v_mb, v_slot, v_ord, v_rec
      FROM mailroom_batch_match(gid, p_owner, v_ids, NULL) m;
    IF v_mb IS NOT NULL THEN
        PERFORM mailroom_batch_record(v_mb, v_slot, array_fill(true, ARRAY[cardinality(v_slot)]));
        INSERT INTO deliveries (group_id, token_id, state, attempts, owner, due_at, holder_left,
                                recovery)
        SELECT gid, v_ids[m.o], 'leased', 1, p_owner, now(), true, m.r
          FROM unnest(v_ord, v_rec) AS m(o, r);
        v_n := v_n + cardinality(v_ord);
    END IF;
    RETURN v_n;
END;
$$;


--
-- Name: mailroom_renew(text, text, bigint[], integer[], integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.mailroom_renew(p_group text, p_owner text, p_ids bigint[], p_attempts integer[], p_lease_ms integer) RETURNS SETOF bigint
    LANGUAGE plpgsql
    SET enable_seqscan TO 'off'
    SET enable_bitmapscan TO 'off'
    AS $$
DECLARE
    gid    INT;
    v_ids  BIGINT[];
    v_att  INT[];
    v_bids BIGINT[];
    v_ord  INT[];
    v_tids TID[];
    v_done BIGINT[];
BEGIN
    SELECT id INTO gid FROM consumer_groups WHERE name = p_group;
    IF NOT FOUND THEN
        RETURN;  -- as 0003's: nothing renewed
    END IF;
    SELECT array_agg(r.id), array_agg(r.attempt) INTO v_ids, v_att
      FROM (SELECT DISTINCT ON (r.id) *
              FROM unnest(p_ids, coalesce(p_attempts,
                                          array_fill(NULL::INT, ARRAY[cardinality(p_ids)])))
                       AS r(id, attempt)
             ORDER BY r.id) r;
    IF v_ids IS NULL THEN
        RETURN;
    END IF;
    -- 1. Batch jobs: their batch's lease is renewed (all its jobs share one lease end).
    SELECT array_agg(DISTINCT m.batch_id), array_agg(m.ord) INTO v_bids, v_ord
      FROM mailroom_batch_match(gid, p_owner, v_ids, v_att) m;
    IF v_bids IS NOT NULL THEN
        UPDATE lease_batches b
           SET due_at = now() + make_interval(secs => p_lease_ms / 1000.0), holder_left = false
         WHERE b.batch_id = ANY (v_bids);
        RETURN QUERY SELECT v_ids[o] FROM unnest(v_ord) AS o;
        IF cardinality(v_ord) = cardinality(v_ids) THEN
            RETURN;
        END IF;
        SELECT array_agg(v_ids[l]), array_agg(v_att[l]) INTO v_ids, v_att
          FROM (SELECT generate_series(1, cardinality(v_ids)) EXCEPT ALL SELECT unnest(v_ord)) x(l);
    END IF;
    -- 2. Jobs with a deliveries row (0020's).
    WHILE v_ids IS NOT NULL LOOP
        SELECT array_agg(d.ctid), array_agg(r.id), array_agg(r.attempt)
          INTO v_tids, v_ids, v_att
          FROM unnest(v_ids, v_att) AS r(id, attempt)
         CROSS JOIN LATERAL (SELECT d.ctid, d.state, d.owner, d.attempts FROM deliveries d
                              WHERE d.group_id = gid AND d.token_id = r.id OFFSET 0) d
         WHERE d.state = 'leased' AND d.owner = p_owner
           AND (r.attempt IS NULL OR d.attempts = r.attempt);
        EXIT WHEN v_tids IS NULL;
        WITH upd AS (
            UPDATE deliveries d
               SET due_at = now() + make_interval(secs => p_lease_ms / 1000.0),
                   holder_left = false
              FROM unnest(v_tids, v_ids, v_att) AS r(tid, id, attempt)
             WHERE d.ctid = r.tid
               AND coalesce(d.group_id = gid AND d.token_id = r.id AND d.state = 'leased'
                            AND d.owner = p_owner
                            AND (r.attempt IS NULL OR d.attempts = r.attempt), false)
            RETURNING d.token_id
        )
        SELECT array_agg(token_id) INTO v_done FROM upd;
        RETURN QUERY SELECT unnest(v_done);
        EXIT WHEN coalesce(cardinality(v_done), 0) = cardinality(v_ids);
        SELECT array_agg(r.id), array_agg(r.attempt) INTO v_ids, v_att
          FROM unnest(v_ids, v_att) AS r(id, attempt)
          LEFT JOIN unnest(v_done) AS x(id) ON x.id = r.id
         WHERE x.id IS NULL;
    END LOOP;
END;
$$;


--
-- Name: mailroom_reputation(integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.mailroom_reputation(p_window_seconds integer) RETURNS TABLE(group_name text, sent bigint, delivered bigint, bounced bigint, complained bigint)
    LANGUAGE sql STABLE
    AS $$
    SELECT g.name, coalesce(sum(r.sent), 0)::BIGINT, coalesce(sum(r.delivered), 0)::BIGINT,
           coalesce(sum(r.bounced), 0)::BIGINT, coalesce(sum(r.complained), 0)::BIGINT
      FROM consumer_groups g
      LEFT JOIN reputation_hourly r
        ON r.group_id = g.id
       AND r.hour > now() - make_interval(secs => p_window_seconds) - interval '1 hour'
     GROUP BY g.name
     ORDER BY g.name;
$$;


--
-- Name: mailroom_reputation_add(integer, bigint, bigint, bigint, bigint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.mailroom_reputation_add(p_group_id integer, p_sent bigint, p_delivered bigint, p_bounced bigint, p_complained bigint) RETURNS void
    LANGUAGE sql
    AS $$
    INSERT INTO reputation_hourly (group_id, hour, sent, delivered, bounced, complained)
    VALUES (p_group_id, date_trunc('hour', now()), p_sent, p_delivered, p_bounced, p_complained);
$$;


--
-- Name: mailroom_stats(text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.mailroom_stats(p_group text) RETURNS TABLE(group_name text, depth bigint, lag_seconds double precision, in_flight bigint, waiting_retry bigint, sent bigint, failed bigint, expired bigint, cancelled bigint, superseded bigint, rate_limited bigint, suppressed bigint)
    LANGUAGE sql STABLE
    SET enable_seqscan TO 'off'
    SET jit TO 'off'
    AS $$
    SELECT g.name, w.depth,
           CASE WHEN w.depth = 0 THEN 0
                ELSE greatest(0, EXTRACT(EPOCH FROM now()) - w.oldest) END,
           f.in_flight + fb.in_flight, f.waiting_retry, c.sent, c.failed, c.expired, c.cancelled,
           c.superseded, c.rate_limited, c.suppressed
      FROM consumer_groups g
      CROSS JOIN LATERAL (
          SELECT sum(c.depth)::BIGINT AS depth, min(c.oldest) AS oldest
            FROM (VALUES ('activation'::token_action, g.prev_snapshot, g.cur_snapshot,
                          g.pos_txid, g.pos_id),
                         ('password_recovery'::token_action,
                          coalesce(g.rec_prev_snapshot, g.prev_snapshot),
                          CASE WHEN g.rec_prev_snapshot IS NULL THEN g.cur_snapshot
                               ELSE g.rec_cur_snapshot END,
                          CASE WHEN g.rec_prev_snapshot IS NULL THEN g.pos_txid
                               ELSE g.rec_pos_txid END,
                          CASE WHEN g.rec_prev_snapshot IS NULL THEN g.pos_id
                               ELSE g.rec_pos_id END))
                 AS k(action, prev, cur, pos_txid, pos_id)
           CROSS JOIN LATERAL (
               SELECT count(*) AS depth, min(t.created_at) AS oldest
                 FROM tokens t
                WHERE t.action = k.action
                  AND t.txid >= pg_snapshot_xmin(k.prev)
                  AND NOT pg_visible_in_snapshot(t.txid, k.prev)
                  AND (k.cur IS NULL
                       OR NOT pg_visible_in_snapshot(t.txid, k.cur)
                       OR (t.txid, t.id) > (k.pos_txid, k.pos_id))) c) w
      CROSS JOIN LATERAL (
          SELECT count(*) FILTER (WHERE x.state = 'leased') AS in_flight,
                 count(*) FILTER (WHERE x.state = 'retry') AS waiting_retry
            FROM deliveries x
           WHERE x.group_id = g.id AND x.state IN ('leased', 'retry')) f
      CROSS JOIN LATERAL (
          SELECT coalesce(sum(length(b.done) - b.acked), 0)::BIGINT AS in_flight
            FROM lease_batches b
           WHERE b.group_id = g.id AND b.state = 'leased') fb
      CROSS JOIN LATERAL (
          SELECT coalesce(sum(k.n) FILTER (WHERE k.state = 'sent'), 0)::BIGINT AS sent,
                 coalesce(sum(k.n) FILTER (WHERE k.state = 'failed'), 0)::BIGINT AS failed,
                 coalesce(sum(k.n) FILTER (WHERE k.state = 'expired'), 0)::BIGINT AS expired,
                 coalesce(sum(k.n) FILTER (WHERE k.state = 'cancelled'), 0)::BIGINT AS cancelled,
                 coalesce(sum(k.n) FILTER (WHERE k.state = 'superseded'), 0)::BIGINT
                     AS superseded,
                 coalesce(sum(k.n) FILTER (WHERE k.state = 'rate_limited'), 0)::BIGINT
                     AS rate_limited,
                 coalesce(sum(k.n) FILTER (WHERE k.state = 'suppressed'), 0)::BIGINT
                     AS suppressed
            FROM delivery_counts k WHERE k.group_id = g.id) c
     WHERE p_group IS NULL OR p_group = '' OR g.name = p_group
     ORDER BY g.name;
$$;


--
-- Name: mailroom_suppress_addresses(text[], text, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.mailroom_suppress_addresses(p_addresses text[], p_reason text, p_source text) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_n INT;
BEGIN
    INSERT INTO suppressions AS s (address, reason, source)
    SELECT DISTINCT lower(trim(a)), p_reason, left(p_source, 1000)
      FROM unnest(p_addresses) a
     WHERE trim(a) <> ''
    ON CONFLICT (address) DO UPDATE
       SET last_seen = now(), source = EXCLUDED.source,
           reason = CASE WHEN s.reason IN ('manual', 'complaint') THEN s.reason
                         ELSE EXCLUDED.reason END,
           expires_at = NULL;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END;
$$;


--
-- Name: mailroom_suppress_recipients(bigint[], text[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.mailroom_suppress_recipients(p_ids bigint[], p_sources text[]) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_n INT;
BEGIN
    INSERT INTO suppressions AS s (address, reason, source)
    SELECT DISTINCT ON (lower(trim(a.email::TEXT)))
           lower(trim(a.email::TEXT)), 'smtp_rejected', left(coalesce(u.source, ''), 1000)
      FROM unnest(p_ids, p_sources) AS u(id, source)
      JOIN tokens t ON t.id = u.id
      JOIN accounts a ON a.id = t.account
     WHERE trim(a.email::TEXT) <> ''
     ORDER BY lower(trim(a.email::TEXT)), u.id DESC
    ON CONFLICT (address) DO UPDATE
       SET last_seen = now(), source = EXCLUDED.source,
           reason = CASE WHEN s.reason = 'manual' OR s.reason = 'complaint' THEN s.reason
                         ELSE EXCLUDED.reason END,
           expires_at = NULL;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END;
$$;


--
-- Name: mailroom_suppression(text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.mailroom_suppression(p_email text) RETURNS TABLE(address text, why text)
    LANGUAGE sql STABLE
    AS $$
    SELECT s.address,
           'address suppressed: ' || s.reason
               || CASE WHEN s.source <> '' THEN ' (' || s.source || ')' ELSE '' END
      FROM suppressions s
     WHERE s.address = lower(trim(p_email))
       AND (s.expires_at IS NULL OR s.expires_at > now());
$$;


SET default_tablespace = '';

SET default_table_access_method = heap;

--
-- Name: tokens; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.tokens (
    id bigint NOT NULL,
    action public.token_action NOT NULL,
    secret bytea DEFAULT public.gen_random_bytes(32) NOT NULL,
    code character varying(5) DEFAULT public.mailroom_random_code() NOT NULL,
    account bigint NOT NULL,
    expires_at bigint DEFAULT (EXTRACT(epoch FROM (now() + '00:15:00'::interval)))::bigint NOT NULL,
    consumed_at bigint,
    created_at bigint DEFAULT (EXTRACT(epoch FROM now()))::bigint NOT NULL,
    txid xid8 DEFAULT pg_current_xact_id() NOT NULL,
    address text,
    rate_limited boolean DEFAULT false NOT NULL,
    superseded_by bigint,
    suppressed_reason text,
    CONSTRAINT tokens_code_check CHECK (((code)::text ~ '^[0-9]{5}$'::text)),
    CONSTRAINT tokens_secret_check CHECK ((octet_length(secret) = 32))
)
WITH (autovacuum_vacuum_scale_factor='0.02', autovacuum_vacuum_insert_scale_factor='0.02', autovacuum_vacuum_cost_delay='0');


--
-- Name: mailroom_token_sendable(public.tokens, public.account_status, bigint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.mailroom_token_sendable(t public.tokens, a_status public.account_status, now_epoch bigint) RETURNS boolean
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT t.expires_at > now_epoch AND t.consumed_at IS NULL
       AND ((t.action = 'activation' AND a_status = 'provisioned')
         OR (t.action = 'password_recovery' AND a_status = 'active'));
$$;


--
-- Name: trg_after_token_consumed(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.trg_after_token_consumed() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF (NEW.action != 'activation') THEN
        RETURN NULL;
    END IF;
    UPDATE accounts SET status = 'active' WHERE id = NEW.account AND status = 'provisioned';
    RETURN NULL;
END;
$$;


--
-- Name: trg_after_token_inserted(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.trg_after_token_inserted() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM pg_notify((SELECT channel FROM mailroom_settings), '');
    RETURN NULL;
END;
$$;


--
-- Name: trg_before_account_insert(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.trg_before_account_insert() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF (NEW.status = 'provisioned') THEN
        INSERT INTO tokens (account, action, address)
        VALUES (NEW.id, 'activation', lower(trim(NEW.email)));
    END IF;
    RETURN NEW;
END;
$$;


--
-- Name: trg_before_account_status_change(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.trg_before_account_status_change() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    ts BIGINT := EXTRACT(EPOCH FROM NOW())::BIGINT;
BEGIN
    IF (NEW.status = OLD.status) THEN
        RETURN NEW;
    END IF;

    NEW.status_changed_at = ts;

    IF (NEW.status = 'active') THEN
        IF (OLD.status = 'provisioned') THEN
            NEW.activated_at = ts;
        ELSIF (OLD.status = 'suspended') THEN
            NEW.unsuspended_at = ts;
            NEW.suspended_at = NULL;
            -- Never activated: back to 'provisioned'.
            IF (OLD.activated_at IS NULL) THEN
                NEW.status = 'provisioned';
            END IF;
        END IF;
    ELSIF (NEW.status = 'suspended') THEN
        NEW.suspended_at = ts;
        NEW.unsuspended_at = NULL;
    ELSIF (NEW.status = 'provisioned' AND OLD.status = 'suspended') THEN
        NEW.unsuspended_at = ts;
        NEW.suspended_at = NULL;
    END IF;

    -- A provisioned account must be able to activate: issue a fresh activation token unless
    -- a live one exists.
    IF (NEW.status = 'provisioned' AND OLD.status = 'suspended'
        AND NOT EXISTS (SELECT 1 FROM tokens t
                         WHERE t.account = NEW.id AND t.action = 'activation'
                           AND t.consumed_at IS NULL
                           AND t.expires_at > EXTRACT(EPOCH FROM NOW()))) THEN
        INSERT INTO tokens (account, action) VALUES (NEW.id, 'activation');
    END IF;
    RETURN NEW;
END;
$$;


--
-- Name: trg_before_token_insert_limits(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.trg_before_token_insert_limits() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    s            mailroom_settings%ROWTYPE;
    v_address    TEXT;
    v_since      BIGINT;
    v_acct_limit INT;
    v_addr_limit INT;
    v_n          INT;
BEGIN
    SELECT * INTO s FROM mailroom_settings;

    -- The account's row lock serialises requests for one account. The row is missing when the
    -- account is being inserted in this transaction (its activation token comes from a BEFORE
    -- INSERT trigger): then only the inserter's address is known.
    SELECT lower(trim(a.email)) INTO v_address FROM accounts a
     WHERE a.id = NEW.account FOR NO KEY UPDATE;
    IF FOUND THEN
        NEW.address := v_address;
    ELSE
        NEW.address := lower(trim(NEW.address));
    END IF;
    -- Accounts whose emails differ only in case share an address: serialise on it too.
    IF NEW.address IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock(hashtextextended('mailroom.address:' || NEW.address, 0));
    END IF;

    v_since := EXTRACT(EPOCH FROM now())::BIGINT - s.limit_window_seconds;
    IF NEW.action = 'password_recovery' THEN
        v_acct_limit := s.recovery_limit_per_account;
        v_addr_limit := s.recovery_limit_per_address;
    ELSE
        v_acct_limit := s.activation_limit_per_account;
        v_addr_limit := s.activation_limit_per_address;
    END IF;

    IF v_acct_limit IS NOT NULL THEN
        SELECT count(*) INTO v_n
          FROM (SELECT 1 FROM tokens t
                 WHERE t.account = NEW.account AND t.action = NEW.action
                   AND t.created_at > v_since AND NOT t.rate_limited
                 LIMIT v_acct_limit) x;
        IF v_n >= v_acct_limit THEN
            NEW.rate_limited := true;
            NEW.suppressed_reason := format(
                'rate limited: %s %s requests for this account in the last %s s (limit %s)',
                v_n, NEW.action, s.limit_window_seconds, v_acct_limit);
        END IF;
    END IF;
    IF NOT NEW.rate_limited AND v_addr_limit IS NOT NULL AND NEW.address IS NOT NULL THEN
        SELECT count(*) INTO v_n
          FROM (SELECT 1 FROM tokens t
                 WHERE t.address = NEW.address AND t.action = NEW.action
                   AND t.created_at > v_since AND NOT t.rate_limited
                 LIMIT v_addr_limit) x;
        IF v_n >= v_addr_limit THEN
            NEW.rate_limited := true;
            NEW.suppressed_reason := format(
                'rate limited: %s %s requests for this address in the last %s s (limit %s)',
                v_n, NEW.action, s.limit_window_seconds, v_addr_limit);
        END IF;
    END IF;

    IF NEW.rate_limited THEN
        NEW.superseded_by := NULL;
    ELSIF NEW.action = 'password_recovery' THEN
        -- Expired ones too: it keeps tokens_pending_recovery_idx at one row per account.
        UPDATE tokens t
           SET superseded_by = NEW.id,
               suppressed_reason = format(
                   'superseded by a newer password recovery request (token %s)', NEW.id)
         WHERE t.account = NEW.account AND t.action = 'password_recovery'
           AND t.superseded_by IS NULL AND NOT t.rate_limited AND t.consumed_at IS NULL
           AND t.id <> NEW.id;
    END IF;
    RETURN NEW;
END;
$$;


--
-- Name: trg_deliveries_count_insert(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.trg_deliveries_count_insert() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO delivery_counts (group_id, state, n)
    SELECT r.group_id, r.state, count(*) FROM new_rows r
     WHERE mailroom_finished_state(r.state)
     GROUP BY r.group_id, r.state;
    RETURN NULL;
END;
$$;


--
-- Name: trg_deliveries_count_update(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.trg_deliveries_count_update() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO delivery_counts (group_id, state, n)
    SELECT x.group_id, x.state, sum(x.n) FROM (
        SELECT o.group_id, o.state, -1 AS n FROM old_rows o WHERE mailroom_finished_state(o.state)
        UNION ALL
        SELECT r.group_id, r.state, 1 AS n FROM new_rows r WHERE mailroom_finished_state(r.state)
    ) x
     GROUP BY x.group_id, x.state
    HAVING sum(x.n) <> 0;
    RETURN NULL;
END;
$$;


--
-- Name: accounts; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.accounts (
    id bigint NOT NULL,
    email character varying(254) NOT NULL,
    status public.account_status DEFAULT 'provisioned'::public.account_status NOT NULL,
    login character varying(254) NOT NULL,
    created_at bigint DEFAULT (EXTRACT(epoch FROM now()))::bigint NOT NULL,
    status_changed_at bigint,
    activated_at bigint,
    suspended_at bigint,
    unsuspended_at bigint,
    locale text,
    CONSTRAINT accounts_locale_bcp47 CHECK (((char_length(locale) <= 35) AND (locale ~ '^[A-Za-z]{2,3}(-[A-Za-z0-9]{2,8})*$'::text)))
);


--
-- Name: accounts_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.accounts_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: accounts_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.accounts_id_seq OWNED BY public.accounts.id;


--
-- Name: budget_grants; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.budget_grants (
    id bigint NOT NULL,
    group_id integer NOT NULL,
    month date NOT NULL,
    holder text NOT NULL,
    recovery boolean NOT NULL,
    price_micros bigint NOT NULL,
    emails integer NOT NULL,
    returned_emails integer DEFAULT 0 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    refunded boolean DEFAULT false NOT NULL,
    CONSTRAINT budget_grants_check CHECK (((returned_emails >= 0) AND (returned_emails <= emails))),
    CONSTRAINT budget_grants_emails_check CHECK ((emails > 0)),
    CONSTRAINT budget_grants_price_micros_check CHECK ((price_micros > 0))
);


--
-- Name: budget_grants_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.budget_grants_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: budget_grants_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.budget_grants_id_seq OWNED BY public.budget_grants.id;


--
-- Name: budget_months; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.budget_months (
    group_id integer NOT NULL,
    month date NOT NULL,
    granted_micros bigint DEFAULT 0 NOT NULL,
    returned_micros bigint DEFAULT 0 NOT NULL,
    CONSTRAINT budget_months_check CHECK ((returned_micros <= granted_micros))
);


--
-- Name: budget_subscriptions; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.budget_subscriptions (
    group_id integer NOT NULL,
    owner text NOT NULL,
    holder text NOT NULL,
    handed bigint DEFAULT 0 NOT NULL,
    settled_unsent bigint DEFAULT 0 NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT budget_subscriptions_handed_check CHECK ((handed >= 0)),
    CONSTRAINT budget_subscriptions_settled_unsent_check CHECK ((settled_unsent >= 0))
);


--
-- Name: consumer_groups; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.consumer_groups (
    id integer NOT NULL,
    name text NOT NULL,
    prev_snapshot pg_snapshot NOT NULL,
    cur_snapshot pg_snapshot,
    pos_txid xid8,
    pos_id bigint,
    max_lost_leases integer DEFAULT 5 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    rec_prev_snapshot pg_snapshot,
    rec_cur_snapshot pg_snapshot,
    rec_pos_txid xid8,
    rec_pos_id bigint,
    CONSTRAINT consumer_groups_max_lost_leases_check CHECK ((max_lost_leases > 0)),
    CONSTRAINT consumer_groups_name_check CHECK ((name ~ '^[a-z][a-z0-9_-]{0,62}$'::text))
);


--
-- Name: consumer_groups_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.consumer_groups_id_seq
    AS integer
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: consumer_groups_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.consumer_groups_id_seq OWNED BY public.consumer_groups.id;


--
-- Name: deliveries; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.deliveries (
    group_id integer NOT NULL,
    token_id bigint NOT NULL,
    state public.delivery_state NOT NULL,
    attempts integer DEFAULT 1 NOT NULL,
    failures integer DEFAULT 0 NOT NULL,
    lost_leases integer DEFAULT 0 NOT NULL,
    owner text,
    due_at timestamp with time zone,
    reason text,
    cost_micros bigint,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    holder_left boolean DEFAULT false NOT NULL,
    recovery boolean DEFAULT false NOT NULL,
    provider_message_id text,
    delivered_at timestamp with time zone,
    bounced_at timestamp with time zone,
    bounce_type text,
    complained_at timestamp with time zone,
    rejected_at timestamp with time zone
)
WITH (autovacuum_vacuum_scale_factor='0.02', autovacuum_vacuum_insert_scale_factor='0.02', autovacuum_vacuum_cost_delay='0');


--
-- Name: delivery_counts; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.delivery_counts (
    group_id integer NOT NULL,
    state public.delivery_state NOT NULL,
    n bigint NOT NULL
);


--
-- Name: lease_batches; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.lease_batches (
    batch_id bigint NOT NULL,
    group_id integer NOT NULL,
    owner text NOT NULL,
    recovery boolean NOT NULL,
    state text DEFAULT 'leased'::text NOT NULL,
    holder_left boolean DEFAULT false NOT NULL,
    due_at timestamp with time zone NOT NULL,
    ids bigint[] NOT NULL,
    done bit varying NOT NULL,
    kept bit varying NOT NULL,
    acked integer DEFAULT 0 NOT NULL,
    lo_id bigint NOT NULL,
    hi_id bigint NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT lease_batches_state_check CHECK ((state = ANY (ARRAY['leased'::text, 'done'::text, 'expired'::text])))
)
WITH (autovacuum_vacuum_scale_factor='0.02', autovacuum_vacuum_insert_scale_factor='0.02', autovacuum_vacuum_cost_delay='0');


--
-- Name: delivery_states; Type: VIEW; Schema: public; Owner: -
--

CREATE VIEW public.delivery_states AS
 SELECT d.group_id,
    d.token_id,
    d.state,
    d.attempts,
    d.failures,
    d.lost_leases,
    d.owner,
    d.due_at,
    d.reason,
    d.cost_micros,
    d.updated_at,
    d.holder_left,
    d.recovery,
    d.provider_message_id,
    d.delivered_at,
    d.bounced_at,
    d.bounce_type,
    d.complained_at,
    d.rejected_at
   FROM public.deliveries d
UNION ALL
 SELECT b.group_id,
    u.id AS token_id,
    (
        CASE
            WHEN (u."bit" = 1) THEN 'sent'::text
            ELSE 'leased'::text
        END)::public.delivery_state AS state,
    1 AS attempts,
    0 AS failures,
    0 AS lost_leases,
        CASE
            WHEN (u."bit" = 0) THEN b.owner
            ELSE NULL::text
        END AS owner,
        CASE
            WHEN (u."bit" = 0) THEN b.due_at
            ELSE NULL::timestamp with time zone
        END AS due_at,
    NULL::text AS reason,
    NULL::bigint AS cost_micros,
    b.updated_at,
    (b.holder_left AND (u."bit" = 0)) AS holder_left,
    b.recovery,
    NULL::text AS provider_message_id,
    NULL::timestamp with time zone AS delivered_at,
    NULL::timestamp with time zone AS bounced_at,
    NULL::text AS bounce_type,
    NULL::timestamp with time zone AS complained_at,
    NULL::timestamp with time zone AS rejected_at
   FROM (public.lease_batches b
     CROSS JOIN LATERAL ( SELECT x.id,
            get_bit((b.done)::"bit", ((x.slot)::integer - 1)) AS "bit",
            get_bit((b.kept)::"bit", ((x.slot)::integer - 1)) AS kept
           FROM unnest(b.ids) WITH ORDINALITY x(id, slot)) u)
  WHERE ((u.kept = 0) AND ((u."bit" = 1) OR (b.state = 'leased'::text)));


--
-- Name: group_budgets; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.group_budgets (
    group_id integer NOT NULL,
    monthly_budget_micros bigint,
    recovery_reserve_percent integer,
    burst integer DEFAULT 10 NOT NULL,
    bucket_micros double precision DEFAULT 0 NOT NULL,
    bucket_at timestamp with time zone,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT group_budgets_burst_check CHECK (((burst >= 1) AND (burst <= 100000))),
    CONSTRAINT group_budgets_monthly_budget_micros_check CHECK ((monthly_budget_micros >= 0)),
    CONSTRAINT group_budgets_recovery_reserve_percent_check CHECK (((recovery_reserve_percent >= 0) AND (recovery_reserve_percent <= 100)))
);


--
-- Name: group_usage; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.group_usage (
    group_id integer NOT NULL,
    month date NOT NULL,
    sent bigint DEFAULT 0 NOT NULL,
    cost_micros bigint DEFAULT 0 NOT NULL
);


--
-- Name: lease_batches_batch_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.lease_batches_batch_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: lease_batches_batch_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.lease_batches_batch_id_seq OWNED BY public.lease_batches.batch_id;


--
-- Name: mailroom_settings; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.mailroom_settings (
    singleton boolean DEFAULT true NOT NULL,
    channel text DEFAULT 'token_insert'::text NOT NULL,
    recovery_limit_per_account integer DEFAULT 5,
    recovery_limit_per_address integer DEFAULT 5,
    activation_limit_per_account integer DEFAULT 3,
    activation_limit_per_address integer DEFAULT 3,
    limit_window_seconds integer DEFAULT 86400 NOT NULL,
    CONSTRAINT mailroom_settings_activation_limit_per_account_check CHECK ((activation_limit_per_account >= 0)),
    CONSTRAINT mailroom_settings_activation_limit_per_address_check CHECK ((activation_limit_per_address >= 0)),
    CONSTRAINT mailroom_settings_channel_check CHECK ((channel ~ '^[a-z_][a-z0-9_]{0,62}$'::text)),
    CONSTRAINT mailroom_settings_limit_window_seconds_check CHECK ((limit_window_seconds > 0)),
    CONSTRAINT mailroom_settings_recovery_limit_per_account_check CHECK ((recovery_limit_per_account >= 0)),
    CONSTRAINT mailroom_settings_recovery_limit_per_address_check CHECK ((recovery_limit_per_address >= 0)),
    CONSTRAINT mailroom_settings_singleton_check CHECK (singleton)
);


--
-- Name: reputation_hourly; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.reputation_hourly (
    group_id integer NOT NULL,
    hour timestamp with time zone NOT NULL,
    sent bigint DEFAULT 0 NOT NULL,
    delivered bigint DEFAULT 0 NOT NULL,
    bounced bigint DEFAULT 0 NOT NULL,
    complained bigint DEFAULT 0 NOT NULL
);


--
-- Name: schema_migrations; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.schema_migrations (
    version integer NOT NULL,
    name text NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: sns_messages; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.sns_messages (
    message_id text NOT NULL,
    type text NOT NULL,
    received_at timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: soft_bounces; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.soft_bounces (
    address text NOT NULL,
    bounced_at timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: suppressions; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.suppressions (
    address text NOT NULL,
    reason text NOT NULL,
    source text DEFAULT ''::text NOT NULL,
    first_seen timestamp with time zone DEFAULT now() NOT NULL,
    last_seen timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone,
    CONSTRAINT suppressions_address_check CHECK (((address = lower(TRIM(BOTH FROM address))) AND (address <> ''::text))),
    CONSTRAINT suppressions_reason_check CHECK ((reason = ANY (ARRAY['hard_bounce'::text, 'complaint'::text, 'smtp_rejected'::text, 'manual'::text])))
);


--
-- Name: tokens_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.tokens_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: tokens_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.tokens_id_seq OWNED BY public.tokens.id;


--
-- Name: accounts id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.accounts ALTER COLUMN id SET DEFAULT nextval('public.accounts_id_seq'::regclass);


--
-- Name: budget_grants id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.budget_grants ALTER COLUMN id SET DEFAULT nextval('public.budget_grants_id_seq'::regclass);


--
-- Name: consumer_groups id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.consumer_groups ALTER COLUMN id SET DEFAULT nextval('public.consumer_groups_id_seq'::regclass);


--
-- Name: lease_batches batch_id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.lease_batches ALTER COLUMN batch_id SET DEFAULT nextval('public.lease_batches_batch_id_seq'::regclass);


--
-- Name: tokens id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.tokens ALTER COLUMN id SET DEFAULT nextval('public.tokens_id_seq'::regclass);


--
-- Data for Name: accounts; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: budget_grants; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: budget_months; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: budget_subscriptions; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: consumer_groups; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.consumer_groups VALUES (1, 'mailroom', '1:1:', NULL, NULL, NULL, 5, '2026-11-25 22:41:13.738119+00', '1:1:', NULL, NULL, NULL);


--
-- Data for Name: deliveries; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: delivery_counts; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: group_budgets; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: group_usage; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: lease_batches; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: mailroom_settings; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.mailroom_settings VALUES (true, 'token_insert', 5, 5, 3, 3, 86400);


--
-- Data for Name: reputation_hourly; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: schema_migrations; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.schema_migrations VALUES (1, 'accounts_tokens', '2026-11-25 22:41:13.598075+00');
INSERT INTO public.schema_migrations VALUES (2, 'queue', '2026-11-25 22:41:13.738119+00');
INSERT INTO public.schema_migrations VALUES (3, 'lease_fencing', '2026-11-25 22:41:13.863696+00');
INSERT INTO public.schema_migrations VALUES (4, 'groups_stats', '2026-11-25 22:41:13.968445+00');
INSERT INTO public.schema_migrations VALUES (5, 'account_locale', '2026-11-25 22:41:14.074605+00');
INSERT INTO public.schema_migrations VALUES (6, 'abuse_limits', '2026-11-25 22:41:14.180846+00');
INSERT INTO public.schema_migrations VALUES (7, 'dequeue_plan', '2026-11-25 22:41:14.338282+00');
INSERT INTO public.schema_migrations VALUES (9, 'suppressions', '2026-11-25 22:41:14.449872+00');
INSERT INTO public.schema_migrations VALUES (10, 'priority', '2026-11-25 22:41:14.548363+00');
INSERT INTO public.schema_migrations VALUES (11, 'group_budget', '2026-11-25 22:41:14.665676+00');
INSERT INTO public.schema_migrations VALUES (12, 'feedback', '2026-11-25 22:41:14.852028+00');
INSERT INTO public.schema_migrations VALUES (13, 'retention_counters', '2026-11-25 22:41:15.003377+00');
INSERT INTO public.schema_migrations VALUES (14, 'recovery_lane', '2026-11-25 22:41:15.136624+00');
INSERT INTO public.schema_migrations VALUES (15, 'budget_refund', '2026-11-25 22:41:15.262873+00');
INSERT INTO public.schema_migrations VALUES (16, 'dequeue_join_plan', '2026-11-25 22:41:15.381162+00');
INSERT INTO public.schema_migrations VALUES (17, 'renew_plan', '2026-11-25 22:41:15.486674+00');
INSERT INTO public.schema_migrations VALUES (18, 'group_lock', '2026-11-25 22:41:15.637342+00');
INSERT INTO public.schema_migrations VALUES (19, 'prune_budget', '2026-11-25 22:41:15.795414+00');
INSERT INTO public.schema_migrations VALUES (20, 'ack_plan', '2026-11-25 22:41:15.986746+00');
INSERT INTO public.schema_migrations VALUES (21, 'batch_leases', '2026-11-25 22:41:16.139964+00');
INSERT INTO public.schema_migrations VALUES (22, 'hot_path', '2026-11-25 22:41:16.375766+00');


--
-- Data for Name: sns_messages; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: soft_bounces; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: suppressions; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: tokens; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Name: accounts_id_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.accounts_id_seq', 1, false);


--
-- Name: budget_grants_id_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.budget_grants_id_seq', 1, false);


--
-- Name: consumer_groups_id_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.consumer_groups_id_seq', 1, true);


--
-- Name: lease_batches_batch_id_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.lease_batches_batch_id_seq', 1, false);


--
-- Name: tokens_id_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.tokens_id_seq', 1, false);


--
-- Name: accounts accounts_email_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.accounts
    ADD CONSTRAINT accounts_email_key UNIQUE (email);


--
-- Name: accounts accounts_login_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.accounts
    ADD CONSTRAINT accounts_login_key UNIQUE (login);


--
-- Name: accounts accounts_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.accounts
    ADD CONSTRAINT accounts_pkey PRIMARY KEY (id);


--
-- Name: budget_grants budget_grants_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.budget_grants
    ADD CONSTRAINT budget_grants_pkey PRIMARY KEY (id);


--
-- Name: budget_months budget_months_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.budget_months
    ADD CONSTRAINT budget_months_pkey PRIMARY KEY (group_id, month);


--
-- Name: budget_subscriptions budget_subscriptions_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.budget_subscriptions
    ADD CONSTRAINT budget_subscriptions_pkey PRIMARY KEY (group_id, owner);


--
-- Name: consumer_groups consumer_groups_name_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.consumer_groups
    ADD CONSTRAINT consumer_groups_name_key UNIQUE (name);


--
-- Name: consumer_groups consumer_groups_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.consumer_groups
    ADD CONSTRAINT consumer_groups_pkey PRIMARY KEY (id);


--
-- Name: deliveries deliveries_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.deliveries
    ADD CONSTRAINT deliveries_pkey PRIMARY KEY (group_id, token_id);


--
-- Name: group_budgets group_budgets_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.group_budgets
    ADD CONSTRAINT group_budgets_pkey PRIMARY KEY (group_id);


--
-- Name: group_usage group_usage_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.group_usage
    ADD CONSTRAINT group_usage_pkey PRIMARY KEY (group_id, month);


--
-- Name: lease_batches lease_batches_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.lease_batches
    ADD CONSTRAINT lease_batches_pkey PRIMARY KEY (batch_id);


--
-- Name: mailroom_settings mailroom_settings_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.mailroom_settings
    ADD CONSTRAINT mailroom_settings_pkey PRIMARY KEY (singleton);


--
-- Name: schema_migrations schema_migrations_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.schema_migrations
    ADD CONSTRAINT schema_migrations_pkey PRIMARY KEY (version);


--
-- Name: sns_messages sns_messages_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.sns_messages
    ADD CONSTRAINT sns_messages_pkey PRIMARY KEY (message_id);


--
-- Name: suppressions suppressions_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.suppressions
    ADD CONSTRAINT suppressions_pkey PRIMARY KEY (address);


--
-- Name: tokens tokens_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.tokens
    ADD CONSTRAINT tokens_pkey PRIMARY KEY (id);


--
-- Name: tokens tokens_secret_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.tokens
    ADD CONSTRAINT tokens_secret_key UNIQUE (secret);


--
-- Name: accounts_address_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX accounts_address_idx ON public.accounts USING btree (lower(TRIM(BOTH FROM email)));


--
-- Name: budget_grants_holder_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX budget_grants_holder_idx ON public.budget_grants USING btree (group_id, holder, expires_at);


--
-- Name: budget_subscriptions_holder_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX budget_subscriptions_holder_idx ON public.budget_subscriptions USING btree (group_id, holder);


--
-- Name: deliveries_due_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX deliveries_due_idx ON public.deliveries USING btree (group_id, due_at) WHERE (state = ANY (ARRAY['leased'::public.delivery_state, 'retry'::public.delivery_state]));


--
-- Name: deliveries_due_recovery_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX deliveries_due_recovery_idx ON public.deliveries USING btree (group_id, due_at) WHERE ((state = ANY (ARRAY['leased'::public.delivery_state, 'retry'::public.delivery_state])) AND recovery);


--
-- Name: deliveries_failed_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX deliveries_failed_idx ON public.deliveries USING btree (group_id, updated_at) WHERE (state = 'failed'::public.delivery_state);


--
-- Name: deliveries_owner_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX deliveries_owner_idx ON public.deliveries USING btree (owner) WHERE (state = 'leased'::public.delivery_state);


--
-- Name: deliveries_provider_message_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX deliveries_provider_message_idx ON public.deliveries USING btree (provider_message_id) WHERE (provider_message_id IS NOT NULL);


--
-- Name: lease_batches_due_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX lease_batches_due_idx ON public.lease_batches USING btree (group_id, due_at) WHERE (state = 'leased'::text);


--
-- Name: lease_batches_finished_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX lease_batches_finished_idx ON public.lease_batches USING btree (batch_id) WHERE (state <> 'leased'::text);


--
-- Name: lease_batches_owner_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX lease_batches_owner_idx ON public.lease_batches USING btree (owner, group_id) WHERE (state = 'leased'::text);


--
-- Name: lease_batches_range_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX lease_batches_range_idx ON public.lease_batches USING gist (int8range(lo_id, hi_id, '[]'::text));


--
-- Name: reputation_hourly_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX reputation_hourly_idx ON public.reputation_hourly USING btree (group_id, hour);


--
-- Name: sns_messages_received_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX sns_messages_received_idx ON public.sns_messages USING btree (received_at);


--
-- Name: soft_bounces_bounced_at_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX soft_bounces_bounced_at_idx ON public.soft_bounces USING btree (bounced_at);


--
-- Name: soft_bounces_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX soft_bounces_idx ON public.soft_bounces USING btree (address, bounced_at);


--
-- Name: tokens_account_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX tokens_account_idx ON public.tokens USING btree (account);


--
-- Name: tokens_action_txid_id_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX tokens_action_txid_id_idx ON public.tokens USING btree (action, txid, id);


--
-- Name: tokens_limit_account_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX tokens_limit_account_idx ON public.tokens USING btree (account, action, created_at) WHERE (NOT rate_limited);


--
-- Name: tokens_limit_address_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX tokens_limit_address_idx ON public.tokens USING btree (address, action, created_at) WHERE (NOT rate_limited);


--
-- Name: tokens_pending_recovery_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX tokens_pending_recovery_idx ON public.tokens USING btree (account) WHERE ((action = 'password_recovery'::public.token_action) AND (superseded_by IS NULL) AND (NOT rate_limited) AND (consumed_at IS NULL));


--
-- Name: tokens_txid_id_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX tokens_txid_id_idx ON public.tokens USING btree (txid, id);


--
-- Name: tokens after_token_consumed; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER after_token_consumed AFTER UPDATE OF consumed_at ON public.tokens FOR EACH ROW WHEN (((new.consumed_at IS NOT NULL) AND (old.consumed_at IS NULL))) EXECUTE FUNCTION public.trg_after_token_consumed();


--
-- Name: tokens after_token_inserted; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER after_token_inserted AFTER INSERT ON public.tokens FOR EACH STATEMENT EXECUTE FUNCTION public.trg_after_token_inserted();


--
-- Name: accounts before_account_insert; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER before_account_insert BEFORE INSERT ON public.accounts FOR EACH ROW EXECUTE FUNCTION public.trg_before_account_insert();


--
-- Name: accounts before_account_status_change; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER before_account_status_change BEFORE UPDATE OF status ON public.accounts FOR EACH ROW EXECUTE FUNCTION public.trg_before_account_status_change();


--
-- Name: tokens before_token_insert_limits; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER before_token_insert_limits BEFORE INSERT ON public.tokens FOR EACH ROW EXECUTE FUNCTION public.trg_before_token_insert_limits();


--
-- Name: deliveries deliveries_count_insert; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER deliveries_count_insert AFTER INSERT ON public.deliveries REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION public.trg_deliveries_count_insert();


--
-- Name: deliveries deliveries_count_update; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER deliveries_count_update AFTER UPDATE ON public.deliveries REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION public.trg_deliveries_count_update();


--
-- Name: budget_grants budget_grants_group_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.budget_grants
    ADD CONSTRAINT budget_grants_group_id_fkey FOREIGN KEY (group_id) REFERENCES public.consumer_groups(id) ON DELETE CASCADE;


--
-- Name: budget_months budget_months_group_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.budget_months
    ADD CONSTRAINT budget_months_group_id_fkey FOREIGN KEY (group_id) REFERENCES public.consumer_groups(id) ON DELETE CASCADE;


--
-- Name: budget_subscriptions budget_subscriptions_group_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.budget_subscriptions
    ADD CONSTRAINT budget_subscriptions_group_id_fkey FOREIGN KEY (group_id) REFERENCES public.consumer_groups(id) ON DELETE CASCADE;


--
-- Name: group_budgets group_budgets_group_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.group_budgets
    ADD CONSTRAINT group_budgets_group_id_fkey FOREIGN KEY (group_id) REFERENCES public.consumer_groups(id) ON DELETE CASCADE;


--
-- Name: group_usage group_usage_group_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.group_usage
    ADD CONSTRAINT group_usage_group_id_fkey FOREIGN KEY (group_id) REFERENCES public.consumer_groups(id) ON DELETE CASCADE;


--
-- Name: reputation_hourly reputation_hourly_group_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.reputation_hourly
    ADD CONSTRAINT reputation_hourly_group_id_fkey FOREIGN KEY (group_id) REFERENCES public.consumer_groups(id) ON DELETE CASCADE;


--
-- Name: tokens tokens_account_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.tokens
    ADD CONSTRAINT tokens_account_fkey FOREIGN KEY (account) REFERENCES public.accounts(id) ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED;


--
-- PostgreSQL database dump complete
--


