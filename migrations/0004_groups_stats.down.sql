DROP FUNCTION IF EXISTS mailroom_ensure_group(TEXT, BOOLEAN);

-- mailroom_stats as 0002 created it.
-- Per-group statistics for operators: depth (committed tokens not yet scanned), lag (age of the
-- oldest of them) and deliveries by state. Cost: O(depth + deliveries of the group).
CREATE OR REPLACE FUNCTION mailroom_stats(p_group TEXT)
    RETURNS TABLE (group_name TEXT, depth BIGINT, lag_seconds DOUBLE PRECISION,
                   in_flight BIGINT, waiting_retry BIGINT, sent BIGINT, failed BIGINT,
                   expired BIGINT, cancelled BIGINT)
    LANGUAGE sql STABLE AS $$
    SELECT g.name, w.depth,
           CASE WHEN w.depth = 0 THEN 0
                ELSE greatest(0, EXTRACT(EPOCH FROM now()) - w.oldest) END,
           d.in_flight, d.waiting_retry, d.sent, d.failed, d.expired, d.cancelled
      FROM consumer_groups g
      CROSS JOIN LATERAL (
          SELECT count(*) AS depth, min(t.created_at) AS oldest
            FROM tokens t
           WHERE t.txid >= pg_snapshot_xmin(g.prev_snapshot)
             AND NOT pg_visible_in_snapshot(t.txid, g.prev_snapshot)
             AND (g.cur_snapshot IS NULL
                  OR NOT pg_visible_in_snapshot(t.txid, g.cur_snapshot)
                  OR (t.txid, t.id) > (g.pos_txid, g.pos_id))) w
      CROSS JOIN LATERAL (
          SELECT count(*) FILTER (WHERE x.state = 'leased') AS in_flight,
                 count(*) FILTER (WHERE x.state = 'retry') AS waiting_retry,
                 count(*) FILTER (WHERE x.state = 'sent') AS sent,
                 count(*) FILTER (WHERE x.state = 'failed') AS failed,
                 count(*) FILTER (WHERE x.state = 'expired') AS expired,
                 count(*) FILTER (WHERE x.state = 'cancelled') AS cancelled
            FROM deliveries x WHERE x.group_id = g.id) d
     WHERE p_group = '' OR g.name = p_group
     ORDER BY g.name;
$$;
