-- Expires up to p_limit (NULL: every one) of group p_group_id's lease batches whose lease ran
-- out, only those of recoveries when p_recoveries_only: their jobs without an outcome become
-- per-job rows as their lease left them ('leased', the lease batch's owner, lease end and
-- holder_left, hand-out count 1), due at once, so they are handed out again like any other
-- lease that ran out. A lease batch another transaction holds (an acknowledgement) is skipped
-- and taken at a later call. Returns how many lease batches it expired. Called by
-- mailroom_dequeue (its step 0) and mailroom_expire_leases, whose planner settings it runs
-- under (no SET clause of its own: none is saved and restored per call). The order makes the
-- plan lease_batches_due_idx's range even without statistics.

CREATE OR REPLACE FUNCTION mailroom_expire_lease_batches(p_group_id integer, p_recoveries_only boolean, p_limit integer) RETURNS bigint
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_batches BIGINT;
BEGIN
    WITH x AS (
        SELECT b.batch_id FROM lease_batches b
         WHERE b.group_id = p_group_id AND b.state = 'leased' AND b.due_at <= now()
           AND (b.recovery OR NOT p_recoveries_only)
         ORDER BY b.due_at LIMIT p_limit
           FOR UPDATE SKIP LOCKED
    ), e AS (
        UPDATE lease_batches b SET state = 'expired', updated_at = now()
          FROM x
         WHERE b.batch_id = x.batch_id
        RETURNING b.group_id, b.owner, b.due_at, b.holder_left, b.recovery, b.ids, b.done
    ), ins AS (
        INSERT INTO deliveries (group_id, token_id, state, attempts, owner, due_at, holder_left,
                                recovery)
        SELECT e.group_id, u.id, 'leased', 1, e.owner, e.due_at, e.holder_left, e.recovery
          FROM e CROSS JOIN LATERAL unnest(e.ids) WITH ORDINALITY AS u(id, slot)
         WHERE get_bit(e.done, u.slot::INT - 1) = 0
        ON CONFLICT DO NOTHING
    )
    SELECT count(*) INTO v_batches FROM e;
    RETURN v_batches;
END;
$$;
