-- The checks of mailroom.request before its insert, for account p_account and action p_action
-- (whose account_status is p_status_needed): returns NULL as o_decision when the request may be
-- inserted, with the address it goes to (o_to: email_change's new address, else NULL) and the
-- account's own (o_email); else o_decision 'refused' or 'suppressed' and o_reason, or 'queued'
-- and o_token for a request whose idempotency key p_key names an earlier one's token of the
-- same action. The account's row is locked first when a key is given (the lock the limits
-- trigger takes): a request with the same key waits for this one and then finds its token.
-- Called by mailroom.request only, as its owner.
CREATE OR REPLACE FUNCTION mailroom.mailroom_request_check(p_account bigint, p_action text, p_status_needed text, p_address text, p_key text, OUT o_decision text, OUT o_token bigint, OUT o_reason text, OUT o_to text, OUT o_email text)
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
DECLARE
    v_status account_status;
    v_kept   tokens%ROWTYPE;
BEGIN
    IF p_address IS NOT NULL AND p_action <> 'email_change' THEN
        o_decision := 'refused';
        o_reason := format('%s goes to the account''s own address: give no address', p_action);
        RETURN;
    END IF;
    IF p_key IS NOT NULL AND length(p_key) NOT BETWEEN 1 AND 200 THEN
        o_decision := 'refused';
        o_reason := 'idempotency key: 1 to 200 characters';
        RETURN;
    END IF;
    IF p_key IS NULL THEN
        SELECT a.status, a.email INTO v_status, o_email FROM accounts a WHERE a.id = p_account;
    ELSE
        SELECT a.status, a.email INTO v_status, o_email FROM accounts a WHERE a.id = p_account
           FOR NO KEY UPDATE;
    END IF;
    IF NOT FOUND THEN
        o_decision := 'refused';
        o_reason := 'unknown account';
        RETURN;
    END IF;
    IF p_key IS NOT NULL THEN
        SELECT * INTO v_kept FROM tokens t
         WHERE t.account = p_account AND t.idempotency_key = p_key
           AND NOT t.rate_limited AND t.expires_at > extract(epoch FROM now())::bigint
         ORDER BY t.id DESC LIMIT 1;
        IF FOUND AND v_kept.action = p_action THEN
            o_decision := 'queued';
            o_token := v_kept.id;
            RETURN;
        ELSIF FOUND THEN
            o_decision := 'refused';
            o_reason := format('idempotency key already used for %s', v_kept.action);
            RETURN;
        END IF;
    END IF;
    IF v_status::text <> p_status_needed THEN
        o_decision := 'refused';
        o_reason := format('wrong account state: %s', v_status);
        RETURN;
    END IF;
    IF p_action = 'email_change' THEN
        o_reason := mailroom_new_address_refusal(p_account, p_address);
        IF o_reason IS NOT NULL THEN
            o_decision := 'refused';
            RETURN;
        END IF;
        o_to := btrim(p_address);
    END IF;
    SELECT x.why INTO o_reason FROM mailroom_suppression(coalesce(o_to, o_email)) x;
    IF FOUND THEN
        o_decision := 'suppressed';
    END IF;
END;
$$;
