-- mailroom.email_events(after, limit): the application's event feed, read from a cursor. Part of
-- the application's interface (docs/integration.md, "Events"): runs as its owner, so the
-- application's role needs EXECUTE on it and no right on mailroom's tables.
--
-- Returns the events with an event_id greater than p_after (NULL: from the first), at most
-- p_limit of them (1 to 10,000; NULL: 1,000), in event_id order: (event_id, token_id, account,
-- action, event, at, detail), event one of sent, delivered, bounced (detail: the bounce type),
-- complained (detail: the feedback type, when the provider gives one), failed, suppressed and
-- expired (detail: the reason), sent (detail: the provider, when the sender says). Event ids
-- become visible in their order (mailroom_publish_events): a reader that stores the last
-- event_id it handled and reads from it again misses none and reads none twice. Events are
-- kept mailroom_settings.event_retention_days (7 by default) after they happened. The ledger's
-- 'retried' events (a try that failed for now) are not the feed's: mailroom.email_history
-- shows them.
CREATE OR REPLACE FUNCTION mailroom.email_events(p_after bigint, p_limit integer)
    RETURNS TABLE (event_id bigint, token_id bigint, account bigint, action text, event text,
                   at timestamptz, detail text)
    LANGUAGE sql STABLE
    SECURITY DEFINER
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
    SELECT e.event_id, e.token_id, e.account, e.action, e.event, e.at, e.detail
      FROM mailroom.email_events e
     WHERE e.event_id > coalesce(p_after, 0)
       AND e.event <> 'retried'
     ORDER BY e.event_id
     LIMIT least(greatest(coalesce(p_limit, 1000), 1), 10000);
$$;
