-- mailroom.consume(token, code): the application hands over the token string from the link (and
-- the code the user typed, where the action has one); mailroom checks it and marks it consumed
-- exactly once. Part of the application's interface (docs/integration.md): runs as its owner,
-- so the application's role needs EXECUTE on it and no right on mailroom's tables.
--
-- Returns one row (outcome, account, action):
--   ok             consumed now; the seeds' lifecycle ran (an activation activated the account);
--   invalid        unknown, malformed or never sent (rate limited): the caller cannot tell which,
--                  and account and action are NULL;
--   consumed       consumed before;
--   superseded     a newer request of the account replaced it;
--   locked         consume_attempts_limit wrong codes were given for it: it never works again;
--   expired        past its expiry;
--   account_state  the account is not in the state the action needs (activation: provisioned;
--                  recovery: active);
--   wrong_code     the code is missing or wrong; counted: at consume_attempts_limit the token is
--                  locked, and its right code no longer works.
-- The refusals are checked in that order: a consumed token stays `consumed` after it expires.
--
-- The token is 86 characters of base64url; its first 32 bytes are the secret the tokens table
-- holds (unique, indexed). The signature after it is the front end's to check, with the
-- signing keys mailroom's database does not hold (clients/); a string whose secret matches
-- only came from the email. A password recovery's code is part of what is signed, and is
-- required here; an activation's code is optional, and checked when given.
--
-- Exactly once under concurrent clicks: the token's row is locked (FOR UPDATE) before it is
-- read, so a second consume of the same token waits for the first's transaction and then sees
-- it consumed. Call it in a transaction of its own and commit whatever the outcome: a wrong
-- code counts only once committed.
CREATE OR REPLACE FUNCTION mailroom.consume(p_token text, p_code text DEFAULT NULL)
    RETURNS TABLE (outcome text, account bigint, action text)
    LANGUAGE plpgsql
    SECURITY DEFINER
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
DECLARE
    t        tokens%ROWTYPE;
    v_raw    bytea;
    v_status account_status;
    v_limit  int;
BEGIN
    IF p_token IS NULL OR p_token !~ '^[A-Za-z0-9_-]{85}[AQgw]$' THEN
        RETURN QUERY SELECT 'invalid', NULL::bigint, NULL::text;
        RETURN;
    END IF;
    v_raw := decode(translate(p_token, '-_', '+/') || '==', 'base64');
    SELECT * INTO t FROM tokens x WHERE x.secret = substring(v_raw FROM 1 FOR 32) FOR UPDATE;
    IF NOT FOUND OR t.rate_limited THEN
        RETURN QUERY SELECT 'invalid', NULL::bigint, NULL::text;
        RETURN;
    END IF;
    IF t.consumed_at IS NOT NULL THEN
        RETURN QUERY SELECT 'consumed', t.account, t.action::text;
        RETURN;
    END IF;
    IF t.superseded_by IS NOT NULL THEN
        RETURN QUERY SELECT 'superseded', t.account, t.action::text;
        RETURN;
    END IF;
    SELECT s.consume_attempts_limit INTO v_limit FROM mailroom_settings s;
    IF t.wrong_codes >= v_limit THEN
        RETURN QUERY SELECT 'locked', t.account, t.action::text;
        RETURN;
    END IF;
    IF t.expires_at <= extract(epoch FROM now())::bigint THEN
        RETURN QUERY SELECT 'expired', t.account, t.action::text;
        RETURN;
    END IF;
    SELECT a.status INTO v_status FROM accounts a WHERE a.id = t.account;
    IF NOT FOUND
       OR (t.action = 'activation' AND v_status <> 'provisioned')
       OR (t.action = 'password_recovery' AND v_status <> 'active') THEN
        RETURN QUERY SELECT 'account_state', t.account, t.action::text;
        RETURN;
    END IF;
    IF (t.action = 'password_recovery' OR p_code IS NOT NULL)
       AND p_code IS DISTINCT FROM t.code THEN
        UPDATE tokens x SET wrong_codes = x.wrong_codes + 1 WHERE x.id = t.id;
        RETURN QUERY SELECT 'wrong_code', t.account, t.action::text;
        RETURN;
    END IF;
    UPDATE tokens x SET consumed_at = extract(epoch FROM now())::bigint WHERE x.id = t.id;
    RETURN QUERY SELECT 'ok', t.account, t.action::text;
END;
$$;
