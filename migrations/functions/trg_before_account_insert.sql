-- The activation token of a new account, decided here under the abuse limits: the account has
-- no earlier request, so only a per-account limit of 0 and the address's limit
-- (mailroom_address_limit) can refuse it. The token is inserted with its address and decision,
-- which before_token_insert_limits then leaves as they are (its WHEN): no probe of the
-- account's row, which is not there yet, and no planner settings (no statement here reads a
-- table whose statistics could mislead: the settings row, a primary-key conflict probe).

CREATE OR REPLACE FUNCTION trg_before_account_insert() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_address      TEXT;
    v_acct_limit   INT;
    v_addr_limit   INT;
    v_window       INT;
    v_reason       TEXT;
BEGIN
    IF (NEW.status = 'provisioned') THEN
        v_address := lower(trim(NEW.email));
        SELECT s.activation_limit_per_account, s.activation_limit_per_address,
               s.limit_window_seconds
          INTO v_acct_limit, v_addr_limit, v_window
          FROM mailroom_settings s;
        IF v_acct_limit = 0 THEN
            v_reason := format(
                'rate limited: 0 activation requests for this account in the last %s s (limit 0)',
                v_window);
        ELSIF v_addr_limit IS NOT NULL THEN
            v_reason := mailroom_address_limit(v_address, 'activation',
                                               EXTRACT(EPOCH FROM now())::BIGINT,
                                               v_addr_limit, v_window);
        END IF;
        INSERT INTO tokens (account, action, address, rate_limited, suppressed_reason)
        VALUES (NEW.id, 'activation', v_address, v_reason IS NOT NULL, v_reason);
    END IF;
    RETURN NEW;
END;
$$;

CREATE OR REPLACE TRIGGER before_account_insert BEFORE INSERT ON accounts FOR EACH ROW EXECUTE FUNCTION trg_before_account_insert();
