-- Retention whatever a group does; password recoveries first across the senders of a group.
--
-- 1. Leases of idle groups run out in the retention pass too. A lease batch whose lease ran out
--    became per-job rows only inside a dequeue of its own group, so a group nobody subscribes to
--    (or one the reputation guard paused) kept its leased batches, and their tokens, for ever.
--    mailroom_expire_leases does for one group what the dequeue's step 0 does (both classes),
--    and records as 'expired' (or 'cancelled': token deleted) the group's jobs waiting to be
--    handed out again whose token expired before the retention's cut-off: no sender may send
--    them any more, and the dequeue would record them so. Their rows then go after another
--    retention, their tokens with them.
-- 2. Token pruning goes on past a window of tokens it must keep. It stopped at the first window
--    that deleted nothing, so the tokens of one leased batch at the head of the table held back
--    every newer token for ever. It now stops only at a window that deletes nothing and holds a
--    token created after the cut-off (ids follow creation: the rest is newer still), so a kept
--    token delays only itself and a pass costs O(tokens older than the retention / batch).
-- 3. mailroom_budget_recovery_first: whether a group paced by a budget has a password recovery
--    waiting to be sent: committed and not handed out yet, or leased to a subscriber that may
--    still send it. The collector then grants activations no slot (docs/design.md, "Recoveries
--    first across senders").

-- Leased recovery batches by group and lease end (few: recoveries are a small share).
CREATE INDEX lease_batches_recovery_idx ON lease_batches (group_id, due_at)
    WHERE state = 'leased' AND recovery;

-- For group p_group_id: expires up to p_batch lease batches whose lease ran out (their jobs
-- without an outcome become 'leased' per-job rows due at once, as in mailroom_dequeue's step 0),
-- then, among the p_batch jobs that have waited longest to be handed out again ('leased' with
-- the lease run out, or 'retry' due), records those whose token expired before p_before_epoch
-- (Unix seconds) as 'expired' and those whose token is gone as 'cancelled'. Rows another
-- transaction holds are skipped. Returns the batches expired, the jobs recorded and whether to
-- call again (a full window that did something).
CREATE FUNCTION mailroom_expire_leases(p_group_id INT, p_before_epoch BIGINT, p_batch INT)
    RETURNS TABLE (batches BIGINT, jobs BIGINT, more BOOLEAN)
    LANGUAGE plpgsql
    SET enable_seqscan = off SET enable_bitmapscan = off
    AS $$
DECLARE
    v_batches BIGINT;
    v_seen    BIGINT;
    v_jobs    BIGINT;
BEGIN
    WITH x AS (
        SELECT b.batch_id FROM lease_batches b
         WHERE b.group_id = p_group_id AND b.state = 'leased' AND b.due_at <= now()
         ORDER BY b.due_at LIMIT p_batch
           FOR UPDATE SKIP LOCKED
    ), e AS (
        UPDATE lease_batches b SET state = 'expired', updated_at = now()
          FROM x
         WHERE b.batch_id = x.batch_id
        RETURNING b.group_id, b.owner, b.due_at, b.holder_left, b.recovery, b.ids, b.done
    ), ins AS (
        INSERT INTO deliveries (group_id, token_id, state, attempts, owner, due_at, holder_left,
                                recovery)
        SELECT e.group_id, u.id, 'leased', 1, e.owner, e.due_at, e.holder_left, e.recovery
          FROM e CROSS JOIN LATERAL unnest(e.ids) WITH ORDINALITY AS u(id, slot)
         WHERE get_bit(e.done, u.slot::INT - 1) = 0
        ON CONFLICT DO NOTHING
    )
    SELECT count(*) INTO v_batches FROM e;

    WITH x AS (
        SELECT d.token_id FROM deliveries d
         WHERE d.group_id = p_group_id AND d.state IN ('leased', 'retry') AND d.due_at <= now()
         ORDER BY d.due_at LIMIT p_batch
           FOR UPDATE SKIP LOCKED
    ), f AS (
        UPDATE deliveries d
           SET state = CASE WHEN t.id IS NULL THEN 'cancelled' ELSE 'expired' END::delivery_state,
               reason = CASE WHEN t.id IS NULL THEN 'token deleted'
                             ELSE 'token expired before delivery' END,
               owner = NULL, due_at = NULL, updated_at = now()
          FROM x LEFT JOIN tokens t ON t.id = x.token_id
         WHERE d.group_id = p_group_id AND d.token_id = x.token_id
           AND (t.id IS NULL OR t.expires_at < p_before_epoch)
        RETURNING 1
    )
    SELECT (SELECT count(*) FROM x), (SELECT count(*) FROM f) INTO v_seen, v_jobs;

    RETURN QUERY SELECT v_batches, v_jobs,
                        v_batches = p_batch OR (v_seen = p_batch AND v_jobs > 0);
END;
$$;

-- 0021's token pruning; it goes on past windows of tokens it must keep (see 2.).
CREATE OR REPLACE FUNCTION mailroom_prune_tokens(p_after BIGINT, p_before_epoch BIGINT, p_batch INT)
    RETURNS TABLE (pruned BIGINT, last_id BIGINT, more BOOLEAN)
    LANGUAGE plpgsql
    SET enable_seqscan = off SET enable_bitmapscan = off
    AS $$
DECLARE
    v_cutoff  BIGINT;
    v_ids     BIGINT[];
    v_seen    INT;
    v_last    BIGINT;
    v_newest  BIGINT;
    v_n       BIGINT;
BEGIN
    SELECT least(p_before_epoch,
                 EXTRACT(EPOCH FROM now())::BIGINT - s.limit_window_seconds)
      INTO v_cutoff FROM mailroom_settings s;
    SELECT array_agg(w.id) FILTER (WHERE w.created_at < v_cutoff AND w.expires_at < v_cutoff),
           count(*), max(w.id), max(w.created_at)
      INTO v_ids, v_seen, v_last, v_newest
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
    -- Go on while a window deletes something or is older than the cut-off throughout (what it
    -- kept is kept for a lease or a delivery row; newer tokens may still go). A window that
    -- deletes nothing and reaches past the cut-off ends the pass.
    RETURN QUERY SELECT v_n, coalesce(v_last, p_after),
                        v_seen = p_batch AND (v_n > 0 OR v_newest < v_cutoff);
END;
$$;

-- Whether group p_group is paced by a budget and one of its password recoveries waits to be
-- sent: committed less than p_hold_ms ago and not yet scanned by the group's recovery cursor
-- (neither rate limited nor superseded), or leased to a subscriber that may still send it (its
-- lease has not run out, its holder has not left, and it was handed out less than p_hold_ms
-- ago: a holder that has not sent it by then holds activations back no longer). And the group's
-- pace in emails per second at p_price (Infinity: unlimited). No row for an unknown group. The
-- queued recoveries are read as mailroom_stats reads depth, on tokens_action_txid_id_idx.
CREATE FUNCTION mailroom_budget_recovery_first(p_group TEXT, p_price BIGINT, p_hold_ms INT,
                                               p_default_budget BIGINT, p_default_reserve INT)
    RETURNS TABLE (waiting BOOLEAN, pace_per_second DOUBLE PRECISION)
    LANGUAGE sql STABLE AS $$
    SELECT s.budget_micros IS NOT NULL
           AND (EXISTS (SELECT 1 FROM lease_batches b
                         WHERE b.group_id = g.id AND b.state = 'leased' AND b.recovery
                           AND b.due_at > now() AND NOT b.holder_left
                           AND b.created_at > now() - make_interval(secs => p_hold_ms / 1000.0))
                OR EXISTS (SELECT 1 FROM deliveries d
                            WHERE d.group_id = g.id AND d.state = 'leased' AND d.recovery
                              AND d.due_at > now() AND NOT d.holder_left
                              AND d.updated_at > now() - make_interval(secs => p_hold_ms / 1000.0))
                OR EXISTS (SELECT 1 FROM tokens t
                            WHERE t.action = 'password_recovery'
                              AND t.txid >= pg_snapshot_xmin(k.prev)
                              AND NOT pg_visible_in_snapshot(t.txid, k.prev)
                              AND (k.cur IS NULL
                                   OR NOT pg_visible_in_snapshot(t.txid, k.cur)
                                   OR (t.txid, t.id) > (k.pos_txid, k.pos_id))
                              AND t.created_at > EXTRACT(EPOCH FROM now())::BIGINT - p_hold_ms / 1000
                              AND NOT t.rate_limited AND t.superseded_by IS NULL)),
           CASE WHEN s.budget_micros IS NULL THEN 'Infinity'::DOUBLE PRECISION
                ELSE greatest(s.budget_micros - s.committed_micros, 0) / s.seconds_left / p_price
           END
      FROM consumer_groups g
     -- The recoveries' cursor (a group that never dequeued since 0010: the activations').
     CROSS JOIN LATERAL (SELECT coalesce(g.rec_prev_snapshot, g.prev_snapshot) AS prev,
                                CASE WHEN g.rec_prev_snapshot IS NULL THEN g.cur_snapshot
                                     ELSE g.rec_cur_snapshot END AS cur,
                                CASE WHEN g.rec_prev_snapshot IS NULL THEN g.pos_txid
                                     ELSE g.rec_pos_txid END AS pos_txid,
                                CASE WHEN g.rec_prev_snapshot IS NULL THEN g.pos_id
                                     ELSE g.rec_pos_id END AS pos_id) k
     CROSS JOIN LATERAL mailroom_budget_state(g.id, p_default_budget, p_default_reserve) s
     WHERE g.name = p_group;
$$;
