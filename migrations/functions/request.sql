-- mailroom.request(account, action, address, idempotency_key): the application asks for an email of `action`
-- for `account`: any row of mailroom.actions by its name, built in (activation, sent again;
-- password_recovery, login_code, email_change, invitation; the notices password_changed,
-- email_changed, account_suspended, account_reactivated) or the application's own. Part of the
-- application's interface (docs/integration.md): runs as its owner, so the application's role
-- needs EXECUTE on it and no right on mailroom's tables.
--
-- `address` is given for email_change only: the new address, which the confirmation goes to
-- and which the account takes when its token is consumed (the pending address is the token's
-- to_address). Every other action goes to the account's own address.
--
-- `idempotency_key` (optional, 1 to 200 characters): a request that gives the key of an earlier
-- request of the same account whose token was not rate limited and has not expired (the
-- action's token lifetime) inserts nothing and returns that token again, as 'queued', whatever
-- became of it since (sent, consumed, superseded); the same key with another action is
-- 'refused'. A key whose request was rate limited, suppressed or refused names no token: the
-- next request with it is decided afresh. Two requests with one key at once are decided one
-- after the other (the account's row is locked first).
--
-- Returns one row (decision, token_id, retry_at, reason):
--   queued        the token is inserted; the collector hands it to the senders;
--   rate_limited  the action's abuse limits refused it (the token row is kept, never sent, so
--                 that the account's emails show it); retry_at is when a request will next be
--                 accepted;
--   suppressed    the address is on the suppression list (nothing inserted); reason says why;
--   refused       nothing inserted; reason: unknown action, unknown account, wrong account
--                 state (the action's account_status: activation provisioned, invitation
--                 invited, password_recovery, login_code and email_change active, notices any),
--                 an address given for an action that goes to the account's own, or for
--                 email_change an address missing, malformed, the account's own or another
--                 account's.
--
-- The limits are the limits trigger's (trg_before_token_insert_limits), decided in the same
-- statement; the account's row is locked by that trigger, so two requests for one account are
-- decided one after the other. Only in READ COMMITTED transactions (an error otherwise): a
-- later snapshot would not see a concurrent request. retry_at: the time the oldest of the
-- requests that fill the account's or the address's limit leaves the window (the later of the
-- two when both are full).
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
    v_window   int;
    v_status   account_status;
    v_email    text;
    v_to       text;
    v_why      text;
    v_id       bigint;
    v_limited  boolean;
    v_reason   text;
    v_at       bigint;
    v_retry    bigint;
    v_kept     tokens%ROWTYPE;
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
    IF p_address IS NOT NULL AND k.name <> 'email_change' THEN
        RETURN QUERY SELECT 'refused', NULL::bigint, NULL::timestamptz,
                            format('%s goes to the account''s own address: give no address', p_action);
        RETURN;
    END IF;
    IF p_idempotency_key IS NOT NULL AND length(p_idempotency_key) NOT BETWEEN 1 AND 200 THEN
        RETURN QUERY SELECT 'refused', NULL::bigint, NULL::timestamptz,
                            'idempotency key: 1 to 200 characters'::text;
        RETURN;
    END IF;
    IF p_idempotency_key IS NULL THEN
        SELECT a.status, a.email INTO v_status, v_email FROM accounts a WHERE a.id = p_account;
    ELSE
        -- The lock the limits trigger takes, taken first: a request with the same key waits
        -- for this one and then finds its token.
        SELECT a.status, a.email INTO v_status, v_email FROM accounts a WHERE a.id = p_account
           FOR NO KEY UPDATE;
    END IF;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'refused', NULL::bigint, NULL::timestamptz, 'unknown account'::text;
        RETURN;
    END IF;
    IF p_idempotency_key IS NOT NULL THEN
        SELECT * INTO v_kept FROM tokens t
         WHERE t.account = p_account AND t.idempotency_key = p_idempotency_key
           AND NOT t.rate_limited AND t.expires_at > extract(epoch FROM now())::bigint
         ORDER BY t.id DESC LIMIT 1;
        IF FOUND AND v_kept.action = k.name THEN
            RETURN QUERY SELECT 'queued', v_kept.id, NULL::timestamptz, NULL::text;
            RETURN;
        ELSIF FOUND THEN
            RETURN QUERY SELECT 'refused', NULL::bigint, NULL::timestamptz,
                                format('idempotency key already used for %s', v_kept.action);
            RETURN;
        END IF;
    END IF;
    IF v_status <> k.account_status THEN
        RETURN QUERY SELECT 'refused', NULL::bigint, NULL::timestamptz,
                            format('wrong account state: %s', v_status);
        RETURN;
    END IF;
    IF k.name = 'email_change' THEN
        v_why := mailroom_new_address_refusal(p_account, p_address);
        IF v_why IS NOT NULL THEN
            RETURN QUERY SELECT 'refused', NULL::bigint, NULL::timestamptz, v_why;
            RETURN;
        END IF;
        v_to := btrim(p_address);
    END IF;
    SELECT x.why INTO v_why FROM mailroom_suppression(coalesce(v_to, v_email)) x;
    IF FOUND THEN
        RETURN QUERY SELECT 'suppressed', NULL::bigint, NULL::timestamptz, v_why;
        RETURN;
    END IF;

    INSERT INTO tokens (account, action, to_address, idempotency_key)
    VALUES (p_account, k.name, v_to, p_idempotency_key)
        RETURNING id, rate_limited, suppressed_reason INTO v_id, v_limited, v_reason;
    IF NOT v_limited THEN
        RETURN QUERY SELECT 'queued', v_id, NULL::timestamptz, NULL::text;
        RETURN;
    END IF;

    -- When the next request would be accepted: each full limit frees a place once its oldest
    -- counted request leaves the window.
    SELECT coalesce(k.limit_window_seconds, s.limit_window_seconds) INTO v_window
      FROM mailroom_settings s;
    SELECT min(x.created_at) INTO v_at
      FROM (SELECT t.created_at FROM tokens t
             WHERE t.account = p_account AND t.action = k.name AND NOT t.rate_limited
               AND t.created_at > extract(epoch FROM now())::bigint - v_window
             ORDER BY t.created_at DESC LIMIT k.limit_per_account) x
     HAVING count(*) >= k.limit_per_account;
    v_retry := v_at + v_window;
    IF k.limit_per_address IS NOT NULL THEN
        SELECT min(x) INTO v_at
          FROM mailroom_address_requests r,
               LATERAL (SELECT u FROM unnest(r.times) u
                         WHERE u > extract(epoch FROM now())::bigint - v_window
                         ORDER BY u DESC LIMIT k.limit_per_address) y(x)
         WHERE r.address = mailroom_limit_address(coalesce(v_to, v_email)) AND r.action = k.name
        HAVING count(*) >= k.limit_per_address;
        v_retry := greatest(v_retry, v_at + v_window);
    END IF;
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
