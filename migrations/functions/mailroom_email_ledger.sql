-- The ledger of tokens p_tokens in group p_group_id, oldest first per token: every published
-- event of the group's deliveries (email_events), then those still staged (event_id NULL;
-- email_events_staged, and the plain SENTs packed in email_events_staged_sent).
-- Events published before the ledger had groups (group_id NULL) are not shown. Called by the
-- collector's FindEmails after mailroom_find_emails.
CREATE OR REPLACE FUNCTION mailroom.mailroom_email_ledger(p_group_id integer, p_tokens bigint[])
    RETURNS TABLE (token_id bigint, event_id bigint, event text, at_ms bigint, handout integer,
                   subscriber text, provider text, provider_message_id text, cost_micros bigint,
                   detail text)
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
    SELECT l.token_id, l.event_id, l.event, (extract(epoch FROM l.at) * 1000)::bigint,
           l.handout, l.subscriber, l.provider, l.provider_message_id, l.cost_micros, l.detail
      FROM (SELECT e.token_id, e.event_id, e.event, e.at, e.handout, e.subscriber, e.provider,
                   e.provider_message_id, e.cost_micros, e.detail
              FROM mailroom.email_events e
              JOIN mailroom.tokens t ON t.id = e.token_id
             WHERE t.id = ANY (p_tokens) AND e.account = t.account AND e.group_id = p_group_id
            UNION ALL
            SELECT s.token_id, NULL, s.event, s.at, s.handout, s.subscriber, s.provider,
                   s.provider_message_id, s.cost_micros, s.detail
              FROM mailroom.email_events_staged s
             WHERE s.token_id = ANY (p_tokens) AND s.group_id = p_group_id
            UNION ALL
            SELECT u.token_id, NULL, 'sent', p.at, p.handout, p.subscriber, p.provider, NULL,
                   p.cost_micros, p.provider
              FROM mailroom.email_events_staged_sent p
             CROSS JOIN LATERAL unnest(p.token_ids) AS u(token_id)
             WHERE p.token_ids && p_tokens AND u.token_id = ANY (p_tokens)
               AND p.group_id = p_group_id) l
     ORDER BY l.token_id, l.event_id NULLS LAST, l.at;
$$;
