-- Per-group statistics for operators, of one group or of every group (p_group NULL or ''):
-- depth (committed tokens of every action not yet scanned, each priority class after its own
-- cursor, and the queued signups not yet collected), lag (age of the oldest of them) and jobs
-- by state; in flight counts the batch jobs
-- without an outcome too. Cost: O(depth + deliveries of the group).
CREATE OR REPLACE FUNCTION mailroom.mailroom_stats(p_group text) RETURNS TABLE(group_name text, depth bigint, lag_seconds double precision, in_flight bigint, waiting_retry bigint, sent bigint, failed bigint, expired bigint, cancelled bigint, superseded bigint, rate_limited bigint, suppressed bigint)
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, mailroom, pg_temp
    SET enable_seqscan TO 'off'
    SET jit TO 'off'
    AS $$
    SELECT g.name, w.depth + q.n,
           CASE WHEN w.depth + q.n = 0 THEN 0
                ELSE greatest(0, EXTRACT(EPOCH FROM now()) - least(w.oldest, q.oldest)) END,
           f.in_flight + fb.in_flight, f.waiting_retry, c.sent, c.failed, c.expired, c.cancelled,
           c.superseded, c.rate_limited, c.suppressed
      FROM consumer_groups g
      -- Queued signups, not yet collected: every group's tokens to come.
      CROSS JOIN (SELECT count(*) AS n, min(s.requested_at) AS oldest FROM mailroom_signups s) q
      CROSS JOIN LATERAL (
          SELECT sum(c.depth)::BIGINT AS depth, min(c.oldest) AS oldest
            FROM group_cursors k
           -- The tokens the cursor's lower snapshot does not see: those of the transactions in
           -- progress at it (probed by txid) and those from its xmax up, as the dequeue's
           -- window reads them; never the range from its xmin, which a transaction left open
           -- anywhere in the cluster holds back.
           CROSS JOIN LATERAL (
               SELECT count(*) AS depth, min(t.created_at) AS oldest
                 FROM (SELECT t.txid, t.id, t.created_at FROM tokens t
                        WHERE t.priority = k.priority
                          AND t.txid >= pg_snapshot_xmax(k.prev_snapshot)
                       UNION ALL
                       -- A probe per transaction (OFFSET 0: never a join that reads the class).
                       SELECT t.txid, t.id, t.created_at
                         FROM pg_snapshot_xip(k.prev_snapshot) x
                        CROSS JOIN LATERAL (SELECT t.txid, t.id, t.created_at FROM tokens t
                                             WHERE t.priority = k.priority AND t.txid = x.x
                                            OFFSET 0) t) t
                WHERE k.cur_snapshot IS NULL
                   OR NOT pg_visible_in_snapshot(t.txid, k.cur_snapshot)
                   OR (t.txid, t.id) > (k.pos_txid, k.pos_id)) c
           WHERE k.group_id = g.id) w
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
