-- mailroom.request(account, action, address, idempotency_key): the application asks for an
-- email of `action` for `account`: any row of mailroom.actions by its name, built in or the
-- application's own. Part of the application's interface (docs/integration.md): runs as its
-- owner, so the application's role needs EXECUTE on it and no right on mailroom's tables.
--
-- `address` is given for email_change only: the new address, which the confirmation goes to
-- and which the account takes when its token is consumed (the token's to_address).
-- `idempotency_key` (optional, 1 to 200 characters): a request that gives the key of an earlier
-- request of the same account whose token was not rate limited and has not expired inserts
-- nothing and returns that token again, as 'queued', whatever became of it since; the same key
-- with another action is 'refused'. A key whose request was rate limited, suppressed or refused
-- names no token. Two requests with one key at once are decided one after the other.
--
-- Returns one row (decision, token_id, retry_at, reason):
--   queued        the token is inserted; the collector hands it to the senders;
--   rate_limited  the action's abuse limits refused it (the token row is kept, never sent);
--                 retry_at is when a request will next be accepted (the later of the
--                 account's and the address's limit: mailroom_request_retry_at);
--   suppressed    the address is on the suppression list (nothing inserted); reason says why;
--   refused       nothing inserted; reason: unknown action, unknown account, wrong account
--                 state (the action's account_status), an address given for an action that
--                 goes to the account's own, or for email_change an address missing,
--                 malformed, the account's own or another account's.
--
-- The checks before the insert are mailroom_request_check's; the limits are the limits
-- trigger's (trg_before_token_insert_limits), decided in the same statement under the account's
-- row lock. Only in READ COMMITTED transactions (an error otherwise): a later snapshot would
-- not see a concurrent request.
CREATE OR REPLACE FUNCTION mailroom.request(p_account bigint, p_action text,
                                            p_address text DEFAULT NULL,
                                            p_idempotency_key text DEFAULT NULL)
    RETURNS TABLE (decision text, token_id bigint, retry_at timestamptz, reason text)
    LANGUAGE plpgsql
    SECURITY DEFINER
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
DECLARE
    k          actions%ROWTYPE;
    v_decision text;
    v_email    text;
    v_to       text;
    v_why      text;
    v_id       bigint;
    v_limited  boolean;
    v_reason   text;
    v_retry    bigint;
BEGIN
    -- The limits count the account's and the address's earlier requests: a snapshot older than
    -- a concurrent request's commit (REPEATABLE READ, SERIALIZABLE) would not see it, and two
    -- requests at once could both pass.
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'mailroom.request runs in READ COMMITTED transactions only (this one is %)',
            current_setting('transaction_isolation')
            USING ERRCODE = 'invalid_transaction_state';
    END IF;
    SELECT * INTO k FROM actions x WHERE x.name = p_action;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'refused', NULL::bigint, NULL::timestamptz,
                            format('unknown action %s', coalesce(quote_literal(left(p_action, 64)), 'NULL'));
        RETURN;
    END IF;
    SELECT * INTO v_decision, v_id, v_why, v_to, v_email
      FROM mailroom_request_check(p_account, k.name, k.account_status::text, p_address,
                                  p_idempotency_key);
    IF v_decision IS NOT NULL THEN
        RETURN QUERY SELECT v_decision, v_id, NULL::timestamptz, v_why;
        RETURN;
    END IF;

    INSERT INTO tokens (account, action, to_address, idempotency_key)
    VALUES (p_account, k.name, v_to, p_idempotency_key)
        RETURNING id, rate_limited, suppressed_reason INTO v_id, v_limited, v_reason;
    IF NOT v_limited THEN
        RETURN QUERY SELECT 'queued', v_id, NULL::timestamptz, NULL::text;
        RETURN;
    END IF;

    v_retry := mailroom_request_retry_at(p_account, k.name, k.limit_per_account,
                                         k.limit_per_address, k.limit_window_seconds,
                                         coalesce(v_to, v_email));
    RETURN QUERY SELECT 'rate_limited', v_id, to_timestamp(v_retry), v_reason;
END;
$$;

-- The rights roles held on the previous signature (request(bigint, text, text), dropped once
-- this file is applied) are given on this one, so an application keeps its EXECUTE.
DO $$
DECLARE
    r text;
BEGIN
    FOR r IN SELECT a.grantee::regrole::text
               FROM pg_proc p CROSS JOIN LATERAL aclexplode(p.proacl) a
              WHERE p.oid = to_regprocedure('mailroom.request(bigint,text,text)')
                AND a.privilege_type = 'EXECUTE' AND a.grantee <> 0 AND a.grantee <> p.proowner
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION mailroom.request(bigint, text, text, text) TO %s',
                       r);
    END LOOP;
END
$$;
