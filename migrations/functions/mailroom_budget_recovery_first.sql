-- Whether group p_group is paced by a budget and one of its critical emails (password
-- recoveries, sign-in codes, address changes: the actions of class critical) waits to be
-- sent: committed less than p_hold_ms ago and not yet scanned by the group's recovery cursor
-- (neither rate limited nor superseded), or leased to a subscriber that may still send it (its
-- lease has not run out, its holder has not left, and it was handed out less than p_hold_ms
-- ago: a holder that has not sent it by then holds activations back no longer). And the group's
-- pace in emails per second at p_price (Infinity: unlimited). No row for an unknown group. The
-- queued ones are read as mailroom_stats reads depth, on tokens_priority_txid_id_idx; the
-- leased batches on lease_batches_recovery_idx. The collector grants activations no slot while
-- it says true (docs/design.md, "Recoveries first across senders").
CREATE OR REPLACE FUNCTION mailroom.mailroom_budget_recovery_first(p_group TEXT, p_price BIGINT,
                                                          p_hold_ms INT, p_default_budget BIGINT,
                                                          p_default_reserve INT)
    RETURNS TABLE (waiting BOOLEAN, pace_per_second DOUBLE PRECISION)
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
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
                            WHERE t.priority = 'critical'
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
     -- The recoveries' cursor.
     CROSS JOIN LATERAL (SELECT c.prev_snapshot AS prev, c.cur_snapshot AS cur, c.pos_txid,
                                c.pos_id
                           FROM group_cursors c
                          WHERE c.group_id = g.id AND c.priority = 'critical') k
     CROSS JOIN LATERAL mailroom_budget_state(g.id, p_default_budget, p_default_reserve) s
     WHERE g.name = p_group;
$$;
