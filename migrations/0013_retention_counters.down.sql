-- Back to 0012: no counters, no pruning functions; mailroom_stats counts deliveries again.
-- Pruned deliveries and tokens are gone for good (their outcomes no longer count).
DROP FUNCTION mailroom_prune_tokens(BIGINT, BIGINT, INT);
DROP FUNCTION mailroom_prune_deliveries(INT, BIGINT, TIMESTAMPTZ, INT);
DROP FUNCTION mailroom_compact_reputation();
DROP FUNCTION mailroom_compact_delivery_counts();
DROP TRIGGER deliveries_count_update ON deliveries;
DROP TRIGGER deliveries_count_insert ON deliveries;
DROP FUNCTION trg_deliveries_count_update();
DROP FUNCTION trg_deliveries_count_insert();
DROP TABLE delivery_counts;
ALTER TABLE deliveries RESET (autovacuum_vacuum_scale_factor,
                              autovacuum_vacuum_insert_scale_factor, autovacuum_vacuum_cost_delay);
ALTER TABLE tokens RESET (autovacuum_vacuum_scale_factor, autovacuum_vacuum_insert_scale_factor,
                          autovacuum_vacuum_cost_delay);

-- 0010's mailroom_stats (same signature; depth per cursor).
CREATE OR REPLACE FUNCTION mailroom_stats(p_group TEXT)
    RETURNS TABLE (group_name TEXT, depth BIGINT, lag_seconds DOUBLE PRECISION,
                   in_flight BIGINT, waiting_retry BIGINT, sent BIGINT, failed BIGINT,
                   expired BIGINT, cancelled BIGINT, superseded BIGINT, rate_limited BIGINT,
                   suppressed BIGINT)
    LANGUAGE sql STABLE AS $$
    SELECT g.name, w.depth,
           CASE WHEN w.depth = 0 THEN 0
                ELSE greatest(0, EXTRACT(EPOCH FROM now()) - w.oldest) END,
           d.in_flight, d.waiting_retry, d.sent, d.failed, d.expired, d.cancelled,
           d.superseded, d.rate_limited, d.suppressed
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
          SELECT count(*) FILTER (WHERE x.state::TEXT = 'leased') AS in_flight,
                 count(*) FILTER (WHERE x.state::TEXT = 'retry') AS waiting_retry,
                 count(*) FILTER (WHERE x.state::TEXT = 'sent') AS sent,
                 count(*) FILTER (WHERE x.state::TEXT = 'failed') AS failed,
                 count(*) FILTER (WHERE x.state::TEXT = 'expired') AS expired,
                 count(*) FILTER (WHERE x.state::TEXT = 'cancelled') AS cancelled,
                 count(*) FILTER (WHERE x.state::TEXT = 'superseded') AS superseded,
                 count(*) FILTER (WHERE x.state::TEXT = 'rate_limited') AS rate_limited,
                 count(*) FILTER (WHERE x.state::TEXT = 'suppressed') AS suppressed
            FROM deliveries x WHERE x.group_id = g.id) d
     WHERE p_group IS NULL OR p_group = '' OR g.name = p_group
     ORDER BY g.name;
$$;
DROP FUNCTION mailroom_finished_state(delivery_state);
