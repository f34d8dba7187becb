-- Step 0 of mailroom_dequeue, for group p_group_id (whose row lock the caller holds): lease
-- batches whose lease ran out (of the critical lane's only with p_recoveries_only) give their
-- jobs without an outcome per-job rows as their lease left them ('leased', the batch's owner,
-- lease end and holder_left, attempt 1), due at once, and are marked expired: the class's
-- mailroom_dequeue_due then hands them out again like any other lease that ran out (attempt 2,
-- lost_leases + 1 unless the holder left). A batch an acknowledgement holds right now is
-- skipped and taken at a later call. The retention's mailroom_expire_leases runs the same
-- statement with a limit.
-- Called by mailroom_dequeue only: its statements are planned under that function's settings.
CREATE OR REPLACE FUNCTION mailroom.mailroom_dequeue_expire(p_group_id integer, p_recoveries_only boolean) RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
BEGIN
    WITH x AS (
        SELECT b.batch_id FROM lease_batches b
         WHERE b.group_id = p_group_id AND b.state = 'leased' AND b.due_at <= now()
           AND (b.recovery OR NOT p_recoveries_only)
         -- The order makes the plan lease_batches_due_idx's range even without statistics
         -- (as the due-again scans of deliveries).
         ORDER BY b.due_at
           FOR UPDATE SKIP LOCKED
    ), e AS (
        UPDATE lease_batches b SET state = 'expired', updated_at = now()
          FROM x
         WHERE b.batch_id = x.batch_id
        RETURNING b.group_id, b.owner, b.due_at, b.holder_left, b.recovery, b.ids, b.done
    )
    INSERT INTO deliveries (group_id, token_id, state, attempts, owner, due_at, holder_left,
                            recovery)
    SELECT e.group_id, u.id, 'leased', 1, e.owner, e.due_at, e.holder_left, e.recovery
      FROM e CROSS JOIN LATERAL unnest(e.ids) WITH ORDINALITY AS u(id, slot)
     WHERE get_bit(e.done, u.slot::INT - 1) = 0
    ON CONFLICT DO NOTHING;
END;
$$;
