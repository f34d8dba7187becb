-- Bounded tables and cheap statistics (issue 13 §4).
--
-- 1. Counters. mailroom_stats used to count every deliveries row of a group on each call and
--    on each metrics scrape: O(all deliveries ever). Finished outcomes are now counted in
--    `delivery_counts`, an insert-only table of per-(group, state) deltas written by
--    statement-level AFTER triggers on deliveries with transition tables: one INSERT of a few
--    rows per statement (a dequeue or an acknowledgement of 1,000 jobs adds at most one row
--    per state), never one per row, and never an UPDATE of a shared row, so concurrent
--    collectors of one group do not queue behind one counter row. mailroom_stats sums the
--    deltas; mailroom_compact_delivery_counts (run by the collector's retention loop) folds
--    them into one row per (group, state). in_flight and waiting_retry stay computed from
--    deliveries_due_idx: O(jobs in flight).
--    Deleting a deliveries row does not change the counts: pruned outcomes keep being counted.
--
-- 2. Retention. mailroom_prune_deliveries and mailroom_prune_tokens delete, one small batch
--    per call (one transaction each, rows locked with SKIP LOCKED, so never a long lock and
--    never a wait on a collector), finished deliveries and tokens older than a cut-off the
--    collector passes (MAILROOM_RETENTION). Each call examines at most p_batch rows of the
--    primary key after p_after and says where the next call starts and whether to go on.

-- Every job writes a delivery row, updates it once per outcome and (pruned) deletes it; every
-- token is deleted too: both tables turn over their whole content every retention period.
-- Autovacuum's defaults (20 % of the table dead before a pass, passes throttled by
-- autovacuum_vacuum_cost_delay) let a busy queue bloat; these tables are vacuumed sooner and
-- unthrottled, as queue tables usually are.
ALTER TABLE deliveries SET (autovacuum_vacuum_scale_factor = 0.02,
                            autovacuum_vacuum_insert_scale_factor = 0.02,
                            autovacuum_vacuum_cost_delay = 0);
ALTER TABLE tokens SET (autovacuum_vacuum_scale_factor = 0.02,
                        autovacuum_vacuum_insert_scale_factor = 0.02,
                        autovacuum_vacuum_cost_delay = 0);

CREATE TABLE delivery_counts (
    group_id INT NOT NULL,
    state    delivery_state NOT NULL,
    n        BIGINT NOT NULL
);

-- Outcome states counted: everything but 'leased' and 'retry'.
CREATE FUNCTION mailroom_finished_state(s delivery_state) RETURNS BOOLEAN
    LANGUAGE sql IMMUTABLE AS $$
    SELECT s::TEXT NOT IN ('leased', 'retry');
$$;

CREATE FUNCTION trg_deliveries_count_insert() RETURNS TRIGGER
    LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO delivery_counts (group_id, state, n)
    SELECT r.group_id, r.state, count(*) FROM new_rows r
     WHERE mailroom_finished_state(r.state)
     GROUP BY r.group_id, r.state;
    RETURN NULL;
END;
$$;

CREATE FUNCTION trg_deliveries_count_update() RETURNS TRIGGER
    LANGUAGE plpgsql AS $$
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

-- Transition tables allow one event per trigger: one trigger for INSERT, one for UPDATE.
-- (The collector never deletes deliveries except by pruning, which must not change counts.)
CREATE TRIGGER deliveries_count_insert
    AFTER INSERT ON deliveries REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION trg_deliveries_count_insert();
CREATE TRIGGER deliveries_count_update
    AFTER UPDATE ON deliveries REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION trg_deliveries_count_update();

-- The triggers exist (and hold their lock on deliveries) before the rows are counted: no
-- outcome is counted twice or missed.
INSERT INTO delivery_counts (group_id, state, n)
SELECT d.group_id, d.state, count(*) FROM deliveries d
 WHERE mailroom_finished_state(d.state)
 GROUP BY d.group_id, d.state;

-- Folds the deltas into one row per (group, state). Rows inserted by transactions that commit
-- meanwhile are not visible to the DELETE and stay as they are; a concurrent compaction waits
-- for the rows this one deletes and then skips them. Returns the number of rows left.
CREATE FUNCTION mailroom_compact_delivery_counts() RETURNS BIGINT
    LANGUAGE sql AS $$
    WITH del AS (
        DELETE FROM delivery_counts RETURNING group_id, state, n
    ), ins AS (
        INSERT INTO delivery_counts (group_id, state, n)
        SELECT group_id, state, sum(n) FROM del GROUP BY group_id, state HAVING sum(n) <> 0
        RETURNING 1
    )
    SELECT count(*) FROM ins;
$$;

-- The same for 0012's reputation counters: one row per group and hour, and hours older than
-- the longest reputation window (90 days, MAILROOM_REPUTATION_WINDOW's maximum) dropped.
-- Returns the number of rows left.
CREATE FUNCTION mailroom_compact_reputation() RETURNS BIGINT
    LANGUAGE sql AS $$
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

-- Same signature and results as 0010's (depth per cursor, as there); finished states come from delivery_counts, in flight
-- and waiting retry from the partial index deliveries_due_idx. Cost: O(depth + jobs in flight
-- + counter rows), no longer O(deliveries). Sequential scans are priced out so that in flight
-- is read from the partial index even without statistics; that makes the scan of the small
-- delivery_counts table look expensive to the planner, so JIT (which would then spend ~0.4 s
-- compiling on every call) is off.
CREATE OR REPLACE FUNCTION mailroom_stats(p_group TEXT)
    RETURNS TABLE (group_name TEXT, depth BIGINT, lag_seconds DOUBLE PRECISION,
                   in_flight BIGINT, waiting_retry BIGINT, sent BIGINT, failed BIGINT,
                   expired BIGINT, cancelled BIGINT, superseded BIGINT, rate_limited BIGINT,
                   suppressed BIGINT)
    LANGUAGE sql STABLE
    SET enable_seqscan = off SET jit = off
    AS $$
    SELECT g.name, w.depth,
           CASE WHEN w.depth = 0 THEN 0
                ELSE greatest(0, EXTRACT(EPOCH FROM now()) - w.oldest) END,
           f.in_flight, f.waiting_retry, c.sent, c.failed, c.expired, c.cancelled,
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

-- Deletes the finished deliveries of group p_group_id updated before p_before among the next
-- p_batch rows of its primary key after token p_after. Rows another transaction holds are
-- skipped (left for a later run). Returns how many were deleted, the last token id examined
-- (the next call's p_after) and whether to go on: false at the end of the group's rows or at
-- a batch with nothing to delete whose newest row is newer than p_before (rows are in token
-- order, which follows time).
CREATE FUNCTION mailroom_prune_deliveries(p_group_id INT, p_after BIGINT, p_before TIMESTAMPTZ,
                                          p_batch INT)
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

-- Deletes, among the next p_batch tokens after id p_after, those no group needs any more:
-- created and expired before p_before_epoch (Unix seconds) and before the abuse limits'
-- window (limit_window_seconds: they still count towards the per-account and per-address
-- limits), with no deliveries row left in any group (all finished and pruned). A group that
-- has not scanned such a token yet (one nobody subscribes to) would only record it as expired:
-- it is not kept for it, so a stale group cannot hold the table's size. Rows another
-- transaction holds are skipped. Returns as mailroom_prune_deliveries, but stops at the first
-- batch that deletes nothing (ids follow creation, and expiry mostly follows it).
CREATE FUNCTION mailroom_prune_tokens(p_after BIGINT, p_before_epoch BIGINT, p_batch INT)
    RETURNS TABLE (pruned BIGINT, last_id BIGINT, more BOOLEAN)
    LANGUAGE plpgsql
    SET enable_seqscan = off SET enable_bitmapscan = off
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
