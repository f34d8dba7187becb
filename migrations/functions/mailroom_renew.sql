-- Extends the leases p_owner holds on p_ids (at the hand-out counts p_attempts; NULL: any) to
-- now + p_lease_ms, jobs in a lease batch first; returns the ids renewed. Called by the
-- collector's Renew and after a reconnect (RenewAll). The holder is alive: its leases count
-- again for poison detection. A row updated concurrently is probed again on its newest version,
-- so a racing update never makes a live lease look lost.
CREATE OR REPLACE FUNCTION mailroom.mailroom_renew(p_group text, p_owner text, p_ids bigint[], p_attempts integer[], p_lease_ms integer) RETURNS SETOF bigint
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    SET enable_seqscan TO 'off'
    SET enable_bitmapscan TO 'off'
    SET jit TO 'off'
    AS $$
DECLARE
    gid     INT;
    v_ids   BIGINT[];
    v_att   INT[];
    v_first BOOLEAN[];
    v_bids  BIGINT[];
    v_ord   INT[];
    v_tids  TID[];
    v_done  BIGINT[];
BEGIN
    SELECT id INTO gid FROM consumer_groups WHERE name = p_group;
    IF NOT FOUND THEN
        RETURN;  -- nothing renewed
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
    -- 1. Jobs in a lease batch (only a job on its first hand-out can be; a NULL hand-out count
    --    may be any): their lease batch's lease is renewed (all its jobs share one lease end).
    v_first := ARRAY(SELECT x.a = 1 FROM unnest(v_att) WITH ORDINALITY AS x(a, o) ORDER BY x.o);
    SELECT array_agg(DISTINCT m.batch_id), array_agg(m.ord) INTO v_bids, v_ord
      FROM mailroom_batch_match(gid, p_owner, v_ids, v_first) m;
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
    -- 2. Jobs with a deliveries row.
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
