-- Lease renewals do not depend on planner statistics (issue 13 §1).
--
-- mailroom_renew joins the ids it is given with deliveries. When deliveries has no column
-- statistics yet (a new deployment before autovacuum's first ANALYZE, a restored database, a
-- table analysed while empty), the planner believes `owner = $owner AND state = 'leased'`
-- matches about one row and nested-loops the subscriber's leases with the ids: with 4,000
-- leases held and 1000 ids, 3,999,000 rows removed by the join filter, 849 ms (BENCHMARKS.md,
-- "Dequeue joins independent of statistics (0016)"). The cost grows with held x renewed, and
-- a sender holding its jobs longer than a lease (budget-paced groups hold thousands) renews
-- them all every few seconds: 10,000 would take tens of seconds, past the statement timeout,
-- and the leases would run out under a live sender. No enable_* setting alone helps: with those
-- estimates a full scan of deliveries_owner_idx as the inner side of a nested loop is still
-- the cheapest plan.
--
-- The renewal now works in two steps, as 0016's dequeue does for jobs due again:
-- 1. one primary-key probe per distinct id (a LATERAL subquery fenced by OFFSET 0 whose only
--    conditions are the key, so no other index qualifies; sequential and bitmap scans are
--    priced out) reads the row's ctid, state, owner and attempt; the fencing (this holder's
--    lease, this attempt) is checked on what it read;
-- 2. the rows kept are updated by ctid (a TID scan, joined to the batch on ctid), and the
--    update checks key and fencing again on the row it finds. Those checks are wrapped in
--    coalesce(...) so that they are filters only: written plainly, they let the planner read
--    the holder's whole deliveries_owner_idx (or the group's range of deliveries_pkey) and
--    filter it by ctid, which is the O(table) plan again.
-- Between the two steps another transaction may update a row (an acknowledgement, the
-- collector's RenewAll, a dequeue taking an expired lease over): under READ COMMITTED the
-- update then follows the row to its newest version, whose ctid is not the one probed, and
-- skips it. Those ids are probed again, and the loop repeats until every id was either renewed
-- or failed its fencing on the row's newest version, so a racing update never makes a live
-- lease look lost. Same signature, fencing and result as 0003's (the ids renewed).
--
-- Why not the acknowledgement too: mailroom_ack has the same exposure (its cached plan can
-- merge-join the batch with a scan of all deliveries until statistics exist), but the same
-- two-step form measured 11.0-12.2 against 7.4-8.0 ms per 1000 SENT in psql (with
-- statistics), about 4 µs more per drained job on the drain's hottest statement; it is left as
-- it is, and its exposure ends at autovacuum's first ANALYZE of deliveries.

CREATE OR REPLACE FUNCTION mailroom_renew(p_group TEXT, p_owner TEXT, p_ids BIGINT[],
                                         p_attempts INT[], p_lease_ms INT)
    RETURNS SETOF BIGINT
    LANGUAGE plpgsql
    SET enable_seqscan = off SET enable_bitmapscan = off
    AS $$
DECLARE
    gid    INT;
    v_ids  BIGINT[];
    v_att  INT[];
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
             WHERE d.ctid = ANY (v_tids) AND d.ctid = r.tid
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
