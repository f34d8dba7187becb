-- mailroom.consume_code(account, action, code): the user typed the code of an action whose code
-- may be typed alone (mailroom.actions.code_alone: login_code, or one of the application's own
-- the operator marked so) on another device, where the application knows the account (the
-- address the user gave) but has no link. A password recovery's code never stands alone: it
-- only ever accompanies the link's secret (mailroom.consume), so that the recovery keeps both
-- factors; here it is `invalid`, like every action whose code_alone is false. Part of the
-- application's interface (docs/integration.md): runs as its owner.
--
-- The code is checked against the account's newest token of that action neither superseded nor
-- rate limited (a newer request supersedes the older), with mailroom.consume's checks, outcomes
-- and exactly-once guarantee (mailroom_consume_token): `consumed` (with the account and the
-- action) once that token was consumed, as consume answers a link clicked twice; a wrong code
-- counts against a pending token, and after consume_attempts_limit wrong codes it is locked for
-- good, so guessing is bounded by the attempts per token times the action's per-account limit
-- of requests, whether or not the caller rolls back (the count is kept where no rollback
-- reaches it: mailroom_consume_token). `invalid` when the action's code may not be typed alone
-- or the account has no token of it. Call it in a transaction of its own and commit whatever
-- the outcome.
CREATE OR REPLACE FUNCTION mailroom.consume_code(p_account bigint, p_action text, p_code text)
    RETURNS TABLE (outcome text, account bigint, action text)
    LANGUAGE plpgsql
    SECURITY DEFINER
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
DECLARE
    v_id bigint;
BEGIN
    SELECT t.id INTO v_id
      FROM tokens t JOIN actions k ON k.name = t.action AND k.code_alone
     WHERE t.account = p_account AND t.action = p_action AND t.action <> 'activation'
       AND t.superseded_by IS NULL AND NOT t.rate_limited
     ORDER BY t.id DESC
     LIMIT 1;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'invalid', NULL::bigint, NULL::text;
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM mailroom_consume_token(v_id, p_code);
END;
$$;
