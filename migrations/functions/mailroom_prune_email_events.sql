-- Deletes up to p_batch events of the application's feed (email_events) that happened more than
-- mailroom_settings.event_retention_days ago, from the first event id on (the primary key's
-- order, which is nearly that of their time: a walk stops at the first event it must keep).
-- Called by the retention pass. Returns as mailroom_prune_budget_subscriptions.
-- Its page images are compressed where the role may (mailroom_compress_page_images).
CREATE OR REPLACE FUNCTION mailroom.mailroom_prune_email_events(p_batch integer)
    RETURNS TABLE(pruned bigint, last_id bigint, more boolean)
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
DECLARE
    v_before TIMESTAMPTZ;
    v_n      BIGINT;
BEGIN
    PERFORM mailroom_compress_page_images();
    SELECT now() - make_interval(days => s.event_retention_days) INTO v_before
      FROM mailroom_settings s;
    WITH first AS (
        SELECT e.event_id, e.at FROM email_events e ORDER BY e.event_id LIMIT p_batch
    ), del AS (
        DELETE FROM email_events e USING first f
         WHERE e.event_id = f.event_id AND f.at < v_before
        RETURNING 1
    )
    SELECT count(*) INTO v_n FROM del;
    RETURN QUERY SELECT v_n, 0::BIGINT, v_n = p_batch;
END;
$$;
