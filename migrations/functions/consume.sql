-- mailroom.consume(token, code): the application hands over the token string from the link (and
-- the code the user typed, where the action has one); mailroom checks it and marks it consumed
-- exactly once. Part of the application's interface (docs/integration.md): runs as its owner,
-- so the application's role needs EXECUTE on it and no right on mailroom's tables.
--
-- Every action that carries a secret: activation, password_recovery, login_code, email_change,
-- invitation and the application's own (a notice's token is never sent: `invalid`).
--
-- Returns one row (outcome, account, action):
--   ok             consumed now; the seeds' lifecycle ran (trg_after_token_consumed: an
--                  activation or an invitation activated the account, an email_change changed
--                  its address and queued the email_changed notice to the old one);
--   invalid        unknown, malformed or never sent (rate limited): the caller cannot tell which,
--                  and account and action are NULL;
--   consumed       consumed before;
--   superseded     a newer request of the account replaced it;
--   locked         consume_attempts_limit wrong codes were given for it: it never works again;
--   expired        past its expiry;
--   account_state  the account is not in the state the action needs (its account_status in
--                  mailroom.actions: activation provisioned, invitation invited, the others
--                  active);
--   wrong_code     the code is missing (for an action that carries one: password_recovery,
--                  login_code) or wrong; counted: at consume_attempts_limit the token is
--                  locked, and its right code no longer works;
--   address_taken  email_change only: another account has the new address now; not consumed.
-- The refusals are checked in that order: a consumed token stays `consumed` after it expires.
--
-- The token is 86 characters of base64url; its first 32 bytes are the secret the tokens table
-- holds (unique, indexed). The signature after it is the front end's to check, with the
-- signing keys mailroom's database does not hold (clients/); a string whose secret matches
-- only came from the email. The code of an action that carries one (password_recovery,
-- login_code) is part of what is signed, and is required here; an activation's code is
-- optional, and checked when given. The checks and the consumption are
-- mailroom_consume_token's, shared with mailroom.consume_code.
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
    v_id bigint;
BEGIN
    IF p_token IS NULL OR p_token !~ '^[A-Za-z0-9_-]{85}[AQgw]$' THEN
        RETURN QUERY SELECT 'invalid', NULL::bigint, NULL::text;
        RETURN;
    END IF;
    SELECT x.id INTO v_id FROM tokens x
     WHERE x.secret = substring(decode(translate(p_token, '-_', '+/') || '==', 'base64')
                                FROM 1 FOR 32);
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'invalid', NULL::bigint, NULL::text;
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM mailroom_consume_token(v_id, p_code);
END;
$$;
