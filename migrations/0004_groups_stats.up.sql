-- Consumer groups that start from the earliest unexpired token, and mailroom_stats(NULL).

-- Creates a group if missing; no-op if it exists. With p_from_earliest the group starts at the
-- earliest token that has not expired yet, so it receives every token still sendable (the
-- collector creates its MAILROOM_GROUPS this way, and a Subscribe with start_from_earliest);
-- otherwise it receives tokens committed from now on (as mailroom_ensure_group(TEXT)).
--
-- The group's cursor is its prev_snapshot: a token is ahead of the group when its transaction
-- is not visible in it. The snapshot 'x:x:' sees exactly the transactions before x, so x is the
-- oldest of the earliest unexpired token's transaction and the oldest transaction still in
-- progress (which may be inserting tokens we cannot see yet). Expired tokens after x are
-- scanned too and recorded as expired.
CREATE FUNCTION mailroom_ensure_group(p_group TEXT, p_from_earliest BOOLEAN) RETURNS VOID
    LANGUAGE plpgsql AS $$
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

-- Per-group statistics for operators, of one group or of every group (p_group NULL or ''): depth (committed tokens not yet scanned), lag (age of the
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
     WHERE p_group IS NULL OR p_group = '' OR g.name = p_group
     ORDER BY g.name;
$$;
