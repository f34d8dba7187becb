-- Gives job p_id of group p_group, if its SENT outcome is recorded only in a lease batch, its own
-- deliveries row as delivery_states shows it ('sent', hand-out count 1, the batch's recovery
-- flag and update time; kept bit set). Called by mailroom_record_feedback, so that feedback
-- matched by the job's tags can be recorded on it. The row's insert is not counted again (the
-- outcome was counted when it was recorded). Returns whether a row was made.

CREATE OR REPLACE FUNCTION mailroom.mailroom_batch_keep_sent(p_group integer, p_id bigint) RETURNS boolean
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
    FOR b IN SELECT x.batch_id, x.recovery, x.updated_at, x.ids, x.done, x.kept
               FROM lease_batches x
              WHERE int8range(x.lo_id, x.hi_id, '[]') @> p_id AND x.group_id = p_group
                FOR UPDATE
    LOOP
        v_slot := array_position(b.ids, p_id);
        CONTINUE WHEN v_slot IS NULL OR get_bit(b.done, v_slot - 1) = 0
                   OR get_bit(b.kept, v_slot - 1) = 1;
        UPDATE lease_batches x SET kept = x.kept | mailroom_bits(length(x.kept), ARRAY[v_slot])
         WHERE x.batch_id = b.batch_id;
        INSERT INTO deliveries (group_id, token_id, state, attempts, recovery, updated_at)
        VALUES (p_group, p_id, 'sent', 1, b.recovery, b.updated_at);
        -- The insert trigger counted the row; the lease batch had counted the outcome already.
        INSERT INTO delivery_counts (group_id, state, n) VALUES (p_group, 'sent', -1);
        RETURN true;
    END LOOP;
    RETURN false;
END;
$$;
