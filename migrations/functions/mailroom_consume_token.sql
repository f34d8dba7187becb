-- The checks and the consumption of token p_id, shared by mailroom.consume (the token from the
-- link) and mailroom.consume_code (the code typed on another device): locks the token's row
-- (FOR UPDATE: a second consume of the same token waits for the first's transaction and then
-- sees it consumed), then answers as mailroom.consume documents, in its order. The code is
-- required when the action carries one (p_code NULL counts as wrong), checked when given for
-- one that does not (activation's unsigned code); a wrong one is counted in wrong_codes and in
-- the token's wrong-code counter (a sequence, which the caller's rollback or EXCEPTION block
-- does not undo: mailroom_take_code_counter), and at consume_attempts_limit wrong codes by
-- either count the token is locked. email_change: the pending address is checked
-- again (another account may have taken it since the request): address_taken, not consumed.
-- Consuming (mailroom_consume_mark) runs the seeds' lifecycle in trg_after_token_consumed.
CREATE OR REPLACE FUNCTION mailroom.mailroom_consume_token(p_id BIGINT, p_code TEXT)
    RETURNS TABLE (outcome TEXT, account BIGINT, action TEXT)
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
DECLARE
    t        tokens%ROWTYPE;
    k        actions%ROWTYPE;
    v_status account_status;
    v_limit  INT;
    v_wrong  BIGINT;
    v_counter REGCLASS;
BEGIN
    SELECT * INTO t FROM tokens x WHERE x.id = p_id FOR UPDATE;
    IF FOUND THEN
        SELECT * INTO k FROM actions x WHERE x.name = t.action;
    END IF;
    IF NOT FOUND OR t.rate_limited OR NOT k.carries_secret THEN
        RETURN QUERY SELECT 'invalid', NULL::BIGINT, NULL::TEXT;
        RETURN;
    END IF;
    IF t.consumed_at IS NOT NULL THEN
        RETURN QUERY SELECT 'consumed', t.account, t.action;
        RETURN;
    END IF;
    IF t.superseded_by IS NOT NULL THEN
        RETURN QUERY SELECT 'superseded', t.account, t.action;
        RETURN;
    END IF;
    SELECT s.consume_attempts_limit INTO v_limit FROM mailroom_settings s;
    -- The wrong codes given: the committed count, or the counter's where it is higher (a wrong
    -- code whose caller rolled back is counted there only). An own counter (code_slot > 0) is
    -- the token's while its slot names it, read FOR SHARE so that no request takes the slot
    -- while this check runs (mailroom_take_code_counter skips locked slots); a slot that no
    -- longer names the token was freed by its expiry: the token answers `expired`, whatever
    -- this transaction's start time says. A shared counter (code_slot < 0) counts every token
    -- sharing it.
    v_wrong := t.wrong_codes;
    IF t.code_slot > 0 THEN
        SELECT format('mailroom.mailroom_code_attempts_%s', c.slot)::regclass INTO v_counter
          FROM code_counters c WHERE c.slot = t.code_slot AND c.token = t.id
           FOR SHARE;
        IF v_counter IS NULL THEN
            RETURN QUERY SELECT 'expired', t.account, t.action;
            RETURN;
        END IF;
    ELSIF t.code_slot < 0 THEN
        v_counter := format('mailroom.mailroom_code_attempts_%s', -t.code_slot)::regclass;
    END IF;
    IF v_counter IS NOT NULL THEN
        v_wrong := greatest(v_wrong, coalesce(pg_sequence_last_value(v_counter), -1) - t.code_base);
    END IF;
    IF v_wrong >= v_limit THEN
        RETURN QUERY SELECT 'locked', t.account, t.action;
        RETURN;
    END IF;
    -- The clock, not the transaction's start: a transaction begun before the expiry and kept
    -- open consumes nothing after it.
    IF t.expires_at <= extract(epoch FROM clock_timestamp())::BIGINT THEN
        RETURN QUERY SELECT 'expired', t.account, t.action;
        RETURN;
    END IF;
    SELECT a.status INTO v_status FROM accounts a WHERE a.id = t.account;
    IF NOT FOUND OR v_status <> k.account_status THEN
        RETURN QUERY SELECT 'account_state', t.account, t.action;
        RETURN;
    END IF;
    IF (k.carries_code OR p_code IS NOT NULL) AND p_code IS DISTINCT FROM t.code THEN
        IF v_counter IS NOT NULL THEN
            PERFORM nextval(v_counter);
        END IF;
        UPDATE tokens x SET wrong_codes = x.wrong_codes + 1 WHERE x.id = t.id;
        RETURN QUERY SELECT 'wrong_code', t.account, t.action;
        RETURN;
    END IF;
    RETURN QUERY SELECT mailroom_consume_mark(t.id, t.account, t.action, t.to_address,
                                              t.code_slot), t.account, t.action;
END;
$$;
