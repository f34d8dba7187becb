-- Gives job p_id of group p_group, if it is in a leased lease batch without an outcome, its own
-- deliveries row as the batch leases it ('leased', the batch's owner, lease end and
-- holder_left, hand-out count 1; done and kept bits set). Called by mailroom_record_feedback
-- when feedback overtakes the acknowledgement; the acknowledgement then records the outcome on
-- that row. Returns whether a row was made.

CREATE OR REPLACE FUNCTION mailroom.mailroom_batch_unpack(p_group integer, p_id bigint) RETURNS boolean
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    SET enable_seqscan TO 'off'
    SET enable_bitmapscan TO 'off'
    SET jit TO 'off'
    AS $$
DECLARE
    b      RECORD;
    v_slot INT;
BEGIN
    FOR b IN SELECT x.batch_id, x.owner, x.due_at, x.holder_left, x.recovery, x.ids, x.done
               FROM lease_batches x
              WHERE int8range(x.lo_id, x.hi_id, '[]') @> p_id AND x.group_id = p_group
                AND x.state = 'leased'
                FOR UPDATE
    LOOP
        v_slot := array_position(b.ids, p_id);
        CONTINUE WHEN v_slot IS NULL OR get_bit(b.done, v_slot - 1) = 1;
        PERFORM mailroom_batch_record(ARRAY[b.batch_id], ARRAY[v_slot], ARRAY[true]);
        INSERT INTO deliveries (group_id, token_id, state, attempts, owner, due_at, holder_left,
                                recovery)
        VALUES (p_group, p_id, 'leased', 1, b.owner, b.due_at, b.holder_left, b.recovery);
        RETURN true;
    END LOOP;
    RETURN false;
END;
$$;
