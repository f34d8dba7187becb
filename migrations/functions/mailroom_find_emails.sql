-- The emails of address p_address (normalised: lower(btrim); every token to it, an address
-- change's to its new address included, and every token of the account whose address it is)
-- or, with p_address NULL, of account p_account, newest first, at most p_limit (1 to 100;
-- NULL: 20), each with its delivery in group p_group (mailroom_delivery_of) and a state as
-- mailroom.account_emails says it (for that group). Raises no_data_found for an unknown group.
-- Called by the collector's FindEmails; tokens and codes are never returned.
CREATE OR REPLACE FUNCTION mailroom.mailroom_find_emails(p_group text, p_address text, p_account bigint, p_limit integer)
    RETURNS TABLE (token_id bigint, account bigint, action text, address text, state text,
                   reason text, requested_at bigint, expires_at bigint, handouts integer,
                   failures integer, provider text, provider_message_id text)
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
#variable_conflict use_column
DECLARE
    v_gid  INT;
    v_addr TEXT := lower(btrim(p_address));
BEGIN
    SELECT g.id INTO v_gid FROM consumer_groups g WHERE g.name = p_group;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown consumer group "%"', p_group USING ERRCODE = 'no_data_found';
    END IF;
    RETURN QUERY
    SELECT t.id, t.account, t.action::TEXT, t.address,
           CASE WHEN t.consumed_at IS NOT NULL THEN 'consumed'
                WHEN t.superseded_by IS NOT NULL THEN 'superseded'
                WHEN t.rate_limited THEN 'rate_limited'
                WHEN d.bounced_at IS NOT NULL THEN 'bounced'
                WHEN d.complained_at IS NOT NULL THEN 'complained'
                WHEN d.state IN ('leased', 'retry') THEN 'sending'
                WHEN d.state IS NOT NULL THEN d.state::TEXT
                WHEN t.expires_at <= extract(epoch FROM now()) THEN 'expired'
                ELSE 'queued' END,
           CASE WHEN t.superseded_by IS NOT NULL OR t.rate_limited THEN t.suppressed_reason
                WHEN d.bounced_at IS NOT NULL THEN d.bounce_type
                ELSE d.reason END,
           t.created_at, t.expires_at, coalesce(d.attempts, 0), coalesce(d.failures, 0),
           d.provider, d.provider_message_id
      FROM (SELECT x.id FROM tokens x
             WHERE v_addr IS NOT NULL AND x.address = v_addr AND NOT x.rate_limited
            UNION
            SELECT x.id FROM accounts a JOIN tokens x ON x.account = a.id
             WHERE v_addr IS NOT NULL AND lower(btrim(a.email)) = v_addr
            UNION
            SELECT x.id FROM tokens x WHERE v_addr IS NULL AND x.account = p_account) ids
      JOIN tokens t ON t.id = ids.id
      LEFT JOIN LATERAL mailroom_delivery_of(v_gid, t.id) d ON true
     ORDER BY t.id DESC
     LIMIT least(greatest(coalesce(p_limit, 20), 1), 100);
END;
$$;
