-- The newest p_limit (1 to 1000) failures, bounces, complaints, suppressed and expired emails
-- of group p_group since p_since, newest first, from the ledger (email_events, through
-- email_events_trouble_idx, which holds those kinds only): the event, its time in Unix
-- milliseconds, its detail, and the email's token, account, action and address. Raises
-- no_data_found for an unknown group. Read by the collector's console ("the last 24 hours").
CREATE OR REPLACE FUNCTION mailroom.mailroom_group_trouble(p_group text, p_since timestamptz, p_limit integer)
    RETURNS TABLE (event_id bigint, event text, at_ms bigint, detail text, token_id bigint,
                   account bigint, action text, address text)
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
#variable_conflict use_column
DECLARE
    v_gid INT;
BEGIN
    v_gid := mailroom_group_id(p_group);
    RETURN QUERY
    SELECT e.event_id, e.event, (extract(epoch FROM e.at) * 1000)::bigint, e.detail, e.token_id,
           e.account, e.action, t.address
      FROM email_events e
      LEFT JOIN tokens t ON t.id = e.token_id
     WHERE e.group_id = v_gid AND e.at >= p_since
       AND e.event IN ('failed', 'bounced', 'complained', 'suppressed', 'expired')
     ORDER BY e.at DESC
     LIMIT least(greatest(coalesce(p_limit, 100), 1), 1000);
END;
$$;
