-- Makes the leases p_owner holds on p_ids due now without counting them as lost: jobs that never
-- reached the subscriber. Called by the collector's Store::Release (a stream that ended before
-- its jobs were written). A job in a lease batch gets its per-job row as it would at expiry
-- (hand-out count 1), due now, holder_left, its bit set. Returns how many jobs were released.

CREATE OR REPLACE FUNCTION mailroom.mailroom_release(p_group text, p_owner text, p_ids bigint[]) RETURNS integer
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    SET enable_seqscan TO 'off'
    SET enable_bitmapscan TO 'off'
    SET jit TO 'off'
    AS $$
DECLARE
    gid    INT;
    v_ids  BIGINT[];
    v_n    INT;
    v_mb   BIGINT[];
    v_slot INT[];
    v_ord  INT[];
    v_rec  BOOLEAN[];
BEGIN
    SELECT id INTO gid FROM consumer_groups WHERE name = p_group;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    SELECT array_agg(DISTINCT u.id) INTO v_ids FROM unnest(p_ids) AS u(id);
    IF v_ids IS NULL THEN
        RETURN 0;
    END IF;
    UPDATE deliveries d SET due_at = now(), holder_left = true
     WHERE d.group_id = gid AND d.owner = p_owner AND d.token_id = ANY (v_ids)
       AND d.state = 'leased';
    GET DIAGNOSTICS v_n = ROW_COUNT;
    SELECT array_agg(m.batch_id), array_agg(m.slot), array_agg(m.ord), array_agg(m.recovery)
      INTO v_mb, v_slot, v_ord, v_rec
      FROM mailroom_batch_match(gid, p_owner, v_ids, NULL) m;
    IF v_mb IS NOT NULL THEN
        PERFORM mailroom_batch_record(v_mb, v_slot, array_fill(true, ARRAY[cardinality(v_slot)]));
        INSERT INTO deliveries (group_id, token_id, state, attempts, owner, due_at, holder_left,
                                recovery)
        SELECT gid, v_ids[m.o], 'leased', 1, p_owner, now(), true, m.r
          FROM unnest(v_ord, v_rec) AS m(o, r);
        v_n := v_n + cardinality(v_ord);
    END IF;
    RETURN v_n;
END;
$$;
