-- Deletes up to p_batch entries of the operator audit recorded more than
-- mailroom_settings.audit_retention_days ago, oldest first (the identity's order is that of
-- their time). Called by the retention pass. Returns as mailroom_prune_email_events.
CREATE OR REPLACE FUNCTION mailroom.mailroom_prune_operator_audit(p_batch integer)
    RETURNS TABLE(pruned bigint, last_id bigint, more boolean)
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
DECLARE
    v_before TIMESTAMPTZ;
    v_n      BIGINT;
BEGIN
    SELECT now() - make_interval(days => s.audit_retention_days) INTO v_before
      FROM mailroom_settings s;
    WITH first AS (
        SELECT a.id, a.at FROM operator_audit a ORDER BY a.id LIMIT p_batch
    ), del AS (
        DELETE FROM operator_audit a USING first f
         WHERE a.id = f.id AND f.at < v_before
        RETURNING 1
    )
    SELECT count(*) INTO v_n FROM del;
    RETURN QUERY SELECT v_n, 0::BIGINT, v_n = p_batch;
END;
$$;
