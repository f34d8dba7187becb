-- The delivery of token p_token in group p_group_id as the group's operator sees it: its
-- deliveries row, else its place in a lease batch (SENT recorded in the batch's bits, or still
-- leased under it; hand-out count 1, no failure), else no row (not handed out yet). Called by
-- mailroom_find_emails.
CREATE OR REPLACE FUNCTION mailroom.mailroom_delivery_of(p_group_id integer, p_token bigint)
    RETURNS TABLE (state mailroom.delivery_state, reason text, attempts integer,
                   failures integer, provider text, provider_message_id text,
                   bounced_at timestamptz, bounce_type text, complained_at timestamptz)
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
    SELECT x.state, x.reason, x.attempts, x.failures, x.provider, x.provider_message_id,
           x.bounced_at, x.bounce_type, x.complained_at
      FROM (SELECT d.state, d.reason, d.attempts, d.failures, d.provider, d.provider_message_id,
                   d.bounced_at, d.bounce_type, d.complained_at, 1 AS pick
              FROM mailroom.deliveries d
             WHERE d.group_id = p_group_id AND d.token_id = p_token
            UNION ALL
            SELECT CASE WHEN get_bit(b.done, array_position(b.ids, p_token) - 1) = 1
                        THEN 'sent' ELSE 'leased' END::mailroom.delivery_state,
                   NULL, 1, 0, NULL, NULL, NULL, NULL, NULL, 2
              FROM mailroom.lease_batches b
             WHERE int8range(b.lo_id, b.hi_id, '[]') @> p_token
               AND b.group_id = p_group_id
               AND p_token = ANY (b.ids)
               AND (get_bit(b.done, array_position(b.ids, p_token) - 1) = 1
                    OR b.state = 'leased')
               AND get_bit(b.kept, array_position(b.ids, p_token) - 1) = 0) x
     ORDER BY x.pick
     LIMIT 1;
$$;
