-- For group p_group_id: expires up to p_limit lease batches whose lease ran out (their jobs
-- without an outcome become 'leased' rows of hand-out count 1, due at once), then records, among
-- the p_limit jobs waiting longest to be handed out again, those whose token expired before
-- p_before_epoch as 'expired' and those whose token is gone as 'cancelled'. Called by the
-- retention pass for every group (docs/design.md, "Retention keeps every table bounded"). Rows
-- another transaction holds are skipped. Returns the batches expired, the jobs recorded and
-- whether to call again.
CREATE OR REPLACE FUNCTION mailroom.mailroom_expire_leases(p_group_id INT, p_before_epoch BIGINT, p_limit INT)
    RETURNS TABLE (batches BIGINT, jobs BIGINT, more BOOLEAN)
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    SET enable_seqscan = off SET enable_bitmapscan = off
    SET jit TO 'off'
    AS $$
DECLARE
    v_batches BIGINT;
    v_seen    BIGINT;
    v_jobs    BIGINT;
BEGIN
    WITH x AS (
        SELECT b.batch_id FROM lease_batches b
         WHERE b.group_id = p_group_id AND b.state = 'leased' AND b.due_at <= now()
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

    WITH x AS (
        SELECT d.token_id FROM deliveries d
         WHERE d.group_id = p_group_id AND d.state IN ('leased', 'retry') AND d.due_at <= now()
         ORDER BY d.due_at LIMIT p_limit
           FOR UPDATE SKIP LOCKED
    ), f AS (
        UPDATE deliveries d
           SET state = CASE WHEN t.id IS NULL THEN 'cancelled' ELSE 'expired' END::delivery_state,
               reason = CASE WHEN t.id IS NULL THEN 'token deleted'
                             ELSE 'token expired before delivery' END,
               owner = NULL, due_at = NULL, updated_at = now()
          FROM x LEFT JOIN tokens t ON t.id = x.token_id
         WHERE d.group_id = p_group_id AND d.token_id = x.token_id
           AND (t.id IS NULL OR t.expires_at < p_before_epoch)
        RETURNING 1
    )
    SELECT (SELECT count(*) FROM x), (SELECT count(*) FROM f) INTO v_seen, v_jobs;

    RETURN QUERY SELECT v_batches, v_jobs,
                        v_batches = p_limit OR (v_seen = p_limit AND v_jobs > 0);
END;
$$;
