-- The jobs among p_ids (p_first_handout parallel: true or NULL where the job may be in a lease
-- batch) that are in a lease batch of group p_group leased to p_owner and have no outcome yet:
-- their batch, slot and place in p_ids (both 1-based) and the batch's recovery flag. Called by
-- mailroom_ack, mailroom_renew and mailroom_release. Locks those batches in batch_id order (no
-- deadlock between calls for one holder); one hash join, never ids x ids, JIT off
-- (docs/design.md, "Leases, lease batches and fencing").

CREATE OR REPLACE FUNCTION mailroom.mailroom_batch_match(p_group integer, p_owner text, p_ids bigint[], p_first_handout boolean[]) RETURNS TABLE(batch_id bigint, slot integer, ord integer, recovery boolean)
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    SET enable_seqscan TO 'off'
    SET enable_bitmapscan TO 'off'
    SET enable_nestloop TO 'off'
    SET enable_mergejoin TO 'off'
    SET jit TO 'off'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
#variable_conflict use_column
DECLARE
    v_lo   BIGINT;
    v_hi   BIGINT;
    v_bids BIGINT[];
BEGIN
    SELECT min(u.id), max(u.id) INTO v_lo, v_hi
      FROM unnest(p_ids, p_first_handout) AS u(id, first_handout)
     WHERE u.first_handout IS NOT FALSE;
    IF v_lo IS NULL THEN
        RETURN;
    END IF;
    SELECT array_agg(x.batch_id) INTO v_bids
      FROM (SELECT b.batch_id FROM lease_batches b
             WHERE b.owner = p_owner AND b.group_id = p_group AND b.state = 'leased'
               AND b.lo_id <= v_hi AND b.hi_id >= v_lo
             ORDER BY b.batch_id
               FOR UPDATE) x;
    IF v_bids IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT b.batch_id, s.slot::INT, u.ord::INT, b.recovery
      FROM lease_batches b
     CROSS JOIN LATERAL unnest(b.ids) WITH ORDINALITY AS s(id, slot)
      JOIN unnest(p_ids, p_first_handout) WITH ORDINALITY AS u(id, first_handout, ord)
           ON u.id = s.id
     WHERE b.batch_id = ANY (v_bids) AND u.first_handout IS NOT FALSE
       AND get_bit(b.done, s.slot::INT - 1) = 0;
END;
$$;
