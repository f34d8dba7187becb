-- Deletes up to p_batch soft bounces older than the 7 days mailroom_record_feedback counts,
-- oldest first (soft_bounces_bounced_at_idx). Called by the retention pass. Returns as
-- mailroom_prune_budget_subscriptions.

CREATE OR REPLACE FUNCTION mailroom.mailroom_prune_soft_bounces(p_batch integer) RETURNS TABLE(pruned bigint, last_id bigint, more boolean)
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
DECLARE
    v_n BIGINT;
BEGIN
    WITH victims AS (
        SELECT b.ctid AS row_id FROM soft_bounces b
         WHERE b.bounced_at <= now() - interval '7 days'
         ORDER BY b.bounced_at LIMIT p_batch
           FOR UPDATE SKIP LOCKED
    ), del AS (
        DELETE FROM soft_bounces b USING victims v WHERE b.ctid = v.row_id
        RETURNING 1
    )
    SELECT count(*) INTO v_n FROM del;
    RETURN QUERY SELECT v_n, 0::BIGINT, v_n = p_batch;
END;
$$;
