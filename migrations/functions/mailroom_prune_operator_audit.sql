-- Deletes up to p_batch entries of the operator audit recorded more than
-- mailroom_settings.audit_retention_days ago, oldest first (the identity's order is that of
-- their time; the audit holds human calls, a few thousand a year, so the walk is short).
-- Called by the retention pass. Returns the entries deleted, 0, and whether to call again.
CREATE OR REPLACE FUNCTION mailroom.mailroom_prune_operator_audit(p_batch integer)
    RETURNS TABLE(pruned bigint, last_id bigint, more boolean)
    LANGUAGE sql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
    WITH old AS (
        SELECT a.id FROM mailroom.operator_audit a, mailroom.mailroom_settings s
         WHERE a.at < now() - make_interval(days => s.audit_retention_days)
         ORDER BY a.id LIMIT p_batch
    ), del AS (
        DELETE FROM mailroom.operator_audit a USING old WHERE a.id = old.id RETURNING 1
    )
    SELECT count(*), 0::bigint, count(*) = p_batch FROM del;
$$;
