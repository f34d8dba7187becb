-- The emails of the account whose address is p_address now (normalised: lower(btrim), through
-- accounts_address_key) or, with p_address NULL, of account p_account: every token of the
-- account (an address change's to its new address, rate-limited requests included), newest
-- first, at most p_limit (1 to 100; NULL: 20), each with its delivery in group p_group
-- (mailroom_delivery_of) and a state as mailroom.account_emails says it (for that group). Raises no_data_found for an unknown group.
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
    v_gid := mailroom_group_id(p_group);
    RETURN QUERY
    SELECT t.id, t.account, t.action::TEXT, t.address,
           CASE WHEN t.consumed_at IS NOT NULL THEN 'consumed'
                WHEN t.superseded_by IS NOT NULL THEN 'superseded'
                WHEN t.rate_limited THEN 'rate_limited'
                WHEN d.bounced_at IS NOT NULL THEN 'bounced'
                WHEN d.complained_at IS NOT NULL THEN 'complained'
                WHEN d.state = 'sent' AND k.carries_secret
                     AND t.expires_at <= extract(epoch FROM now()) THEN 'expired'
                WHEN d.state IN ('leased', 'retry') THEN 'sending'
                WHEN d.state IS NOT NULL THEN d.state::TEXT
                WHEN t.expires_at <= extract(epoch FROM now()) THEN 'expired'
                ELSE 'queued' END,
           CASE WHEN t.superseded_by IS NOT NULL OR t.rate_limited THEN t.suppressed_reason
                WHEN d.bounced_at IS NOT NULL THEN d.bounce_type
                ELSE d.reason END,
           t.created_at, t.expires_at, coalesce(d.attempts, 0), coalesce(d.failures, 0),
           d.provider, d.provider_message_id
      FROM tokens t
      JOIN actions k ON k.name = t.action
      LEFT JOIN LATERAL mailroom_delivery_of(v_gid, t.id) d ON true
     WHERE t.account = CASE WHEN v_addr IS NULL THEN p_account
                            ELSE (SELECT a.id FROM accounts a
                                   WHERE lower(btrim(a.email)) = v_addr) END
     ORDER BY t.id DESC
     LIMIT least(greatest(coalesce(p_limit, 20), 1), 100);
END;
$$;
