-- Back before 0026: the advisory lock and the count per address, and their index. The previous
-- trigger function is put back here (not left to the source files) so that the application's
-- inserts keep working until the next `collector migrate up` applies the files again.
DROP FUNCTION IF EXISTS mailroom_prune_address_requests(BIGINT, INT);

CREATE INDEX tokens_limit_address_idx ON tokens (address, action, created_at)
    WHERE NOT rate_limited;

CREATE OR REPLACE FUNCTION trg_before_token_insert_limits() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    s            mailroom_settings%ROWTYPE;
    v_address    TEXT;
    v_since      BIGINT;
    v_acct_limit INT;
    v_addr_limit INT;
    v_n          INT;
BEGIN
    SELECT * INTO s FROM mailroom_settings;

    -- The account's row lock serialises requests for one account. The row is missing when the
    -- account is being inserted in this transaction (its activation token comes from a BEFORE
    -- INSERT trigger): then only the inserter's address is known.
    SELECT lower(trim(a.email)) INTO v_address FROM accounts a
     WHERE a.id = NEW.account FOR NO KEY UPDATE;
    IF FOUND THEN
        NEW.address := v_address;
    ELSE
        NEW.address := lower(trim(NEW.address));
    END IF;
    -- Accounts whose emails differ only in case share an address: serialise on it too.
    IF NEW.address IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock(hashtextextended('mailroom.address:' || NEW.address, 0));
    END IF;

    v_since := EXTRACT(EPOCH FROM now())::BIGINT - s.limit_window_seconds;
    IF NEW.action = 'password_recovery' THEN
        v_acct_limit := s.recovery_limit_per_account;
        v_addr_limit := s.recovery_limit_per_address;
    ELSE
        v_acct_limit := s.activation_limit_per_account;
        v_addr_limit := s.activation_limit_per_address;
    END IF;

    IF v_acct_limit IS NOT NULL THEN
        SELECT count(*) INTO v_n
          FROM (SELECT 1 FROM tokens t
                 WHERE t.account = NEW.account AND t.action = NEW.action
                   AND t.created_at > v_since AND NOT t.rate_limited
                 LIMIT v_acct_limit) x;
        IF v_n >= v_acct_limit THEN
            NEW.rate_limited := true;
            NEW.suppressed_reason := format(
                'rate limited: %s %s requests for this account in the last %s s (limit %s)',
                v_n, NEW.action, s.limit_window_seconds, v_acct_limit);
        END IF;
    END IF;
    IF NOT NEW.rate_limited AND v_addr_limit IS NOT NULL AND NEW.address IS NOT NULL THEN
        SELECT count(*) INTO v_n
          FROM (SELECT 1 FROM tokens t
                 WHERE t.address = NEW.address AND t.action = NEW.action
                   AND t.created_at > v_since AND NOT t.rate_limited
                 LIMIT v_addr_limit) x;
        IF v_n >= v_addr_limit THEN
            NEW.rate_limited := true;
            NEW.suppressed_reason := format(
                'rate limited: %s %s requests for this address in the last %s s (limit %s)',
                v_n, NEW.action, s.limit_window_seconds, v_addr_limit);
        END IF;
    END IF;

    IF NEW.rate_limited THEN
        NEW.superseded_by := NULL;
    ELSIF NEW.action = 'password_recovery' THEN
        -- Expired ones too: it keeps tokens_pending_recovery_idx at one row per account.
        UPDATE tokens t
           SET superseded_by = NEW.id,
               suppressed_reason = format(
                   'superseded by a newer password recovery request (token %s)', NEW.id)
         WHERE t.account = NEW.account AND t.action = 'password_recovery'
           AND t.superseded_by IS NULL AND NOT t.rate_limited AND t.consumed_at IS NULL
           AND t.id <> NEW.id;
    END IF;
    RETURN NEW;
END;
$$;

DROP TABLE mailroom_address_requests;
