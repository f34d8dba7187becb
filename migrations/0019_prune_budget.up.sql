-- Budget tables stay bounded too (issue 13 §4 "Tables stay bounded").
--
-- Every table of the schema and what bounds it:
--   deliveries, tokens        pruned after MAILROOM_RETENTION by the collector (0013)
--   delivery_counts           folded to one row per (group, state) each pass (0013)
--   reputation_hourly         folded to one row per (group, hour), hours past 91 days dropped
--   sns_messages              rows older than 30 days deleted by each new message (0012):
--                             30 days of SNS messages at most (SNS retries an HTTP/S
--                             endpoint for 3,600 s at most)
--   soft_bounces              only the last 7 days count; older rows were deleted only when
--                             the same address bounced again, so an address that bounced once
--                             stayed for ever: now pruned by the retention pass (below)
--   budget_grants             kept an hour past expiry, then deleted by mailroom_budget_grant
--                             whatever their state: now folded per holder after an hour and
--                             pruned once they can no longer matter by the retention pass
--                             (below)
--   budget_subscriptions      one row per linked subscription (sender connection) for ever:
--                             now pruned by the retention pass (below)
--   group_usage, budget_months   one row per group and month (the spending history; kept)
--   consumer_groups, group_budgets, mailroom_settings, schema_migrations   configuration
--   suppressions              one row per suppressed address, by design (an operator removes
--                             an entry, or it stops counting at its expires_at)
--   accounts                  the application's own table
--
-- 1. Grants. 0011's mailroom_budget_grant deleted every grant an hour after it expired, unused
--    or not. That kept the table small but broke 0015's refund for any sender that lived
--    longer than an hour: its early grants were gone while its subscriptions still counted the
--    jobs it spent them on, so granted - returned - possible_spend came out too low (mostly
--    negative) and little or nothing came back when it was killed. The grant no longer deletes anything; the
--    collector's retention pass calls mailroom_prune_budget_grants, which deletes, a small
--    batch per transaction (rows locked with SKIP LOCKED), a grant that expired before the
--    retention cut-off and can no longer matter:
--      * it was refunded (its holder's refund already took what was safe), or
--      * it was fully returned (returned_emails = emails: it counts 0 in any refund), or
--      * its holder has no linked subscription (the refund never gives anything back to it), or
--      * its holder holds no grant newer than the cut-off and its refund figure
--        (granted - returned - possible_spend over what is left) is 0 or less: nothing to give
--        back, and the holder is long dead.
--
--    The invariant (the refund's safety bound, 0015): pruning never makes any holder's refund
--    larger. For holder H the refund is
--        refund(H) = sum over H's grant rows of (emails - returned_emails)
--                  - sum over H's subscription rows of greatest(handed - settled_unsent, 0).
--    Deleting a grant row removes a term emails - returned_emails >= 0 from the first sum and
--    nothing from the second: refund(H) goes down or stays (whichever grant, whatever a
--    concurrent refund or return does: the refund locks H's grants, the prune skips locked
--    rows). Deleting a subscription row removes a term >= 0 from the second sum and would
--    raise refund(H): so a subscription row goes only when H has no grant row left, which
--    makes refund(H) nothing whatever its subscriptions count, and when a later grant of the
--    same holder name cannot have been spent through it (see 2.).
--
-- 2. Subscriptions. mailroom_prune_budget_subscriptions deletes a budget_subscriptions row
--    whose holder has no grant row left in its group, that was not updated since the cut-off
--    and whose owner holds no lease in the group (deliveries 'leased', run out or not: an
--    outcome for it could still settle). A subscription used again later is linked again by
--    mailroom_budget_handed (an upsert).
--
-- 3. Soft bounces. mailroom_prune_soft_bounces deletes rows older than the 7 days that
--    mailroom_record_feedback counts, oldest first, a batch per call.
--
-- 4. Grants of a live sender. A sender that runs for weeks is granted thousands of times
--    (1,000 emails a grant when unlimited; one second of pace, often 1 email, under a
--    budget) and none of those grants may be pruned while it may still be refunded. The
--    retention pass folds them instead (mailroom_compact_budget_grants): the unrefunded grants
--    of one holder, month, price and class that expired more than an hour ago become one row
--    (the newest id, emails and returned_emails summed, the earliest created_at, the latest
--    expires_at). Every sum the refund, the prune and budget_months use is unchanged, so
--    refund(H) is exactly what it was; a live holder keeps about an hour of grants plus one
--    row per month, price and class. The refund then credits a folded row as one grant (the
--    split of a refund between rows of different prices in one month may differ from the
--    unfolded rows'; the total and each month's total of emails do not). A return naming a
--    folded-away grant credits nothing, as it did when 0011 deleted grants after an hour:
--    senders return a grant before it expires.
--
-- 5. The refund's first query. 0015's grouped every grant row of the table on every pass
--    (every minute). It now starts from the linked holders (budget_subscriptions), probes
--    each one's newest grant on an index (a holder still granted is dropped without reading
--    its grants) and sums only the grants of holders whose grants all expired; holders with
--    nothing to give back are skipped before any row is locked. The rest of the function is
--    0015's (its figure, read under the lock, now from mailroom_budget_unspent: the same two
--    sums), and it returns the same rows.

CREATE INDEX budget_grants_holder_idx ON budget_grants (group_id, holder, expires_at);
-- Only 0011's pruning in mailroom_budget_grant read it; one index less to write per grant.
DROP INDEX budget_grants_expiry_idx;
CREATE INDEX soft_bounces_bounced_at_idx ON soft_bounces (bounced_at);

-- What refund(H) would be now (see 1.), without locks.
CREATE FUNCTION mailroom_budget_unspent(p_gid INT, p_holder TEXT) RETURNS BIGINT
    LANGUAGE sql STABLE AS $$
    SELECT (SELECT coalesce(sum(bg.emails - bg.returned_emails), 0)
              FROM budget_grants bg
             WHERE bg.group_id = p_gid AND bg.holder = p_holder)
         - (SELECT coalesce(sum(greatest(s.handed - s.settled_unsent, 0)), 0)
              FROM budget_subscriptions s
             WHERE s.group_id = p_gid AND s.holder = p_holder);
$$;

-- 0011's grant without its pruning (see 1.).
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

-- 0015's refund; only the holders it walks are found differently (see 5.).
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

-- Deletes, among the next p_batch grants after id p_after, those that expired before p_before
-- and can no longer matter (see 1.). Rows another transaction holds are skipped. Returns as
-- mailroom_prune_deliveries (0013): how many were deleted, the last id examined (the next
-- call's p_after) and whether to go on (false at the end of the table or at a batch with
-- nothing to delete whose newest grant is newer than p_before: ids follow time).
CREATE FUNCTION mailroom_prune_budget_grants(p_after BIGINT, p_before TIMESTAMPTZ, p_batch INT)
    RETURNS TABLE (pruned BIGINT, last_id BIGINT, more BOOLEAN)
    LANGUAGE plpgsql
    SET enable_seqscan = off SET enable_bitmapscan = off
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

-- Deletes up to p_batch subscription rows that can no longer matter (see 2.), updated before
-- p_before, rows another transaction holds skipped. Returns how many were deleted, 0 as
-- last_id (the table has no numeric key: each call starts again from the first row left)
-- and whether a full batch was deleted (then there may be more).
CREATE FUNCTION mailroom_prune_budget_subscriptions(p_before TIMESTAMPTZ, p_batch INT)
    RETURNS TABLE (pruned BIGINT, last_id BIGINT, more BOOLEAN)
    LANGUAGE plpgsql AS $$
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

-- Deletes up to p_batch soft bounces older than the 7 days mailroom_record_feedback counts,
-- oldest first (soft_bounces_bounced_at_idx); returns as mailroom_prune_budget_subscriptions.
CREATE FUNCTION mailroom_prune_soft_bounces(p_batch INT)
    RETURNS TABLE (pruned BIGINT, last_id BIGINT, more BOOLEAN)
    LANGUAGE plpgsql AS $$
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

-- Folds, among the next p_batch grants after id p_after, the unrefunded grants that expired
-- before p_before into one row per (group, holder, month, price, class) (see 4.). Rows
-- another transaction holds are skipped. Returns how many rows were folded away, the last id
-- examined and whether to go on (as mailroom_prune_budget_grants).
CREATE FUNCTION mailroom_compact_budget_grants(p_after BIGINT, p_before TIMESTAMPTZ, p_batch INT)
    RETURNS TABLE (pruned BIGINT, last_id BIGINT, more BOOLEAN)
    LANGUAGE plpgsql
    SET enable_seqscan = off SET enable_bitmapscan = off
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
