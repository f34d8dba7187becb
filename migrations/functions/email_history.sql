-- mailroom.email_history(account, limit): the ledger of an account's emails, for the application
-- and its support staff. Part of the application's interface (docs/integration.md, "The
-- ledger"): runs as its owner, so the application's role needs EXECUTE on it (granted by
-- mailroom.grant_application) and no right on mailroom's tables.
--
-- Returns the newest p_limit (1 to 10,000; NULL: 1,000) events of the emails of account
-- p_account in the delivery group (mailroom_settings.delivery_group, the senders' group, as
-- account_emails reports it; events older than the ledger name no group and are kept), oldest
-- first: every try that ended (sent, failed, expired, and 'retried': a try
-- that failed for now, detail the sender's reason) and every event after it (delivered,
-- bounced with its type, complained, suppressed), with the try's hand-out count (handout), the
-- subscription that tried it (subscriber: the first 12 characters of its id, as the logs name
-- it), the provider (of a sent email, or whose feedback the event is), the provider's message
-- id and cost of a sent email. Events not yet published to the feed (staged within the last
-- second or so, the plain SENTs packed in email_events_staged_sent among them) come last, with
-- a NULL event_id. Kept as the feed's events are
-- (mailroom_settings.event_retention_days).
CREATE OR REPLACE FUNCTION mailroom.email_history(p_account bigint, p_limit integer DEFAULT 1000)
    RETURNS TABLE (event_id bigint, token_id bigint, action text, event text, at timestamptz,
                   handout integer, subscriber text, provider text, provider_message_id text,
                   cost_micros bigint, detail text)
    LANGUAGE sql STABLE
    SECURITY DEFINER
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
    SELECT h.event_id, h.token_id, h.action, h.event, h.at, h.handout, h.subscriber, h.provider,
           h.provider_message_id, h.cost_micros, h.detail
      FROM (SELECT e.event_id, e.token_id, e.action, e.event, e.at, e.handout, e.subscriber,
                   e.provider, e.provider_message_id, e.cost_micros, e.detail
              FROM mailroom.email_events e
             WHERE e.account = p_account
               AND (e.group_id IS NULL OR e.group_id = (SELECT mailroom_delivery_group_id()))
            UNION ALL
            SELECT NULL, s.token_id, t.action, s.event, s.at, s.handout, s.subscriber,
                   s.provider, s.provider_message_id, s.cost_micros, s.detail
              FROM mailroom.email_events_staged s
              JOIN mailroom.tokens t ON t.id = s.token_id
             WHERE t.account = p_account
               AND (s.group_id IS NULL OR s.group_id = (SELECT mailroom_delivery_group_id()))
            UNION ALL
            SELECT NULL, u.token_id, t.action, 'sent', p.at, p.handout, p.subscriber,
                   p.provider, NULL, p.cost_micros, p.provider
              FROM mailroom.email_events_staged_sent p
             CROSS JOIN LATERAL unnest(p.token_ids) AS u(token_id)
              JOIN mailroom.tokens t ON t.id = u.token_id
             WHERE t.account = p_account AND p.group_id = (SELECT mailroom_delivery_group_id())
             ORDER BY event_id DESC NULLS FIRST, at DESC
             LIMIT least(greatest(coalesce(p_limit, 1000), 1), 10000)) h
     ORDER BY h.event_id NULLS LAST, h.at;
$$;
