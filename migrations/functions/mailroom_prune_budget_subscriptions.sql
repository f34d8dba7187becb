-- Deletes up to p_batch subscription rows updated before p_before that can no longer matter: of
-- a holder with no grant row left, whose owner holds no job or batch lease. Called by the
-- retention pass; rows another transaction holds are skipped. Returns how many were deleted, 0
-- as last_id (no numeric key: each call starts from the first row left) and whether a full batch
-- was deleted (then there may be more).
CREATE OR REPLACE FUNCTION mailroom.mailroom_prune_budget_subscriptions(p_before timestamp with time zone, p_batch integer) RETURNS TABLE(pruned bigint, last_id bigint, more boolean)
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
DECLARE
    v_n BIGINT;
BEGIN
    WITH victims AS (
        SELECT s.group_id, s.owner FROM budget_subscriptions s
         WHERE s.updated_at < p_before
           AND NOT EXISTS (SELECT 1 FROM budget_grants g
                            WHERE g.group_id = s.group_id AND g.holder = s.holder)
           AND NOT EXISTS (SELECT 1 FROM deliveries d
                            WHERE d.owner = s.owner AND d.state = 'leased'
                              AND d.group_id = s.group_id)
           AND NOT EXISTS (SELECT 1 FROM lease_batches b
                            WHERE b.owner = s.owner AND b.state = 'leased'
                              AND b.group_id = s.group_id)
         LIMIT p_batch
           FOR UPDATE SKIP LOCKED
    ), del AS (
        DELETE FROM budget_subscriptions s USING victims v
         WHERE s.group_id = v.group_id AND s.owner = v.owner
        RETURNING 1
    )
    SELECT count(*) INTO v_n FROM del;
    RETURN QUERY SELECT v_n, 0::BIGINT, v_n = p_batch;
END;
$$;
