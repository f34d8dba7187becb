-- Back before 0029: every collected signup's token is decided by the limits trigger again. The
-- 0028 bodies of the collection, the limits trigger (without its WHEN) and the per-address limit
-- (one request per call) are put back, not left to the source files, so that collections and
-- the application's tokens keep working until the next `collector migrate up`; then the new
-- functions and the collection's mark are dropped.

CREATE OR REPLACE FUNCTION mailroom_address_limit(p_address TEXT, p_action token_action,
                                                  p_at BIGINT, p_limit INT, p_window INT)
    RETURNS TEXT
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_since   BIGINT := p_at - p_window;  -- the window ends at the request's time
    v_counted BOOLEAN;
BEGIN
    IF p_limit > 0 THEN
        INSERT INTO mailroom_address_requests AS r (address, action, times)
        VALUES (p_address, p_action, ARRAY[p_at])
        ON CONFLICT (address, action) DO UPDATE
           SET times = ARRAY(SELECT x FROM unnest(r.times) x
                              ORDER BY x DESC LIMIT p_limit - 1) || p_at
         WHERE (SELECT count(*) FROM unnest(r.times) x WHERE x > v_since) < p_limit
        RETURNING true INTO v_counted;
    END IF;
    IF v_counted THEN
        RETURN NULL;
    END IF;
    RETURN format('rate limited: %s %s requests for this address in the last %s s (limit %s)',
                  p_limit, p_action, p_window, p_limit);
END;
$$;

CREATE OR REPLACE FUNCTION trg_before_token_insert_limits() RETURNS trigger
    LANGUAGE plpgsql
    SET enable_seqscan = off SET enable_bitmapscan = off SET enable_sort = off SET jit = off
    AS $$
DECLARE
    s            mailroom_settings%ROWTYPE;
    v_address    TEXT;
    v_since      BIGINT;
    v_acct_limit INT;
    v_addr_limit INT;
    v_n          INT := 0;
    v_reason     TEXT;
BEGIN
    SELECT * INTO s FROM mailroom_settings;
    -- The window ends at the request's time: a collected signup's token carries its signup's
    -- time, however late it was collected.
    v_since := NEW.created_at - s.limit_window_seconds;
    IF NEW.action = 'password_recovery' THEN
        v_acct_limit := s.recovery_limit_per_account;
        v_addr_limit := s.recovery_limit_per_address;
    ELSE
        v_acct_limit := s.activation_limit_per_account;
        v_addr_limit := s.activation_limit_per_address;
    END IF;

    -- The account's row lock serialises requests for one account. The row is missing when the
    -- account is inserted later in the application's transaction (the foreign key is
    -- deferred): then only the inserter's address is known, and the account has no earlier
    -- request to count.
    SELECT lower(trim(a.email)) INTO v_address FROM accounts a
     WHERE a.id = NEW.account FOR NO KEY UPDATE;
    IF FOUND THEN
        NEW.address := v_address;
        IF v_acct_limit > 0 THEN
            SELECT count(*) INTO v_n
              FROM (SELECT 1 FROM tokens t
                     WHERE t.account = NEW.account AND t.action = NEW.action
                       AND t.created_at > v_since AND NOT t.rate_limited
                     ORDER BY t.created_at DESC
                     LIMIT v_acct_limit) x;
        END IF;
    ELSE
        NEW.address := lower(trim(NEW.address));
    END IF;
    IF v_n >= v_acct_limit THEN
        NEW.rate_limited := true;
        NEW.suppressed_reason := format(
            'rate limited: %s %s requests for this account in the last %s s (limit %s)',
            v_n, NEW.action, s.limit_window_seconds, v_acct_limit);
    END IF;

    IF NOT NEW.rate_limited AND v_addr_limit IS NOT NULL AND NEW.address IS NOT NULL THEN
        v_reason := mailroom_address_limit(NEW.address, NEW.action, NEW.created_at,
                                           v_addr_limit, s.limit_window_seconds);
        IF v_reason IS NOT NULL THEN
            NEW.rate_limited := true;
            NEW.suppressed_reason := v_reason;
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

CREATE OR REPLACE TRIGGER before_token_insert_limits BEFORE INSERT ON tokens FOR EACH ROW
    EXECUTE FUNCTION trg_before_token_insert_limits();

CREATE OR REPLACE FUNCTION mailroom_collect_signups(p_limit INT) RETURNS INT
    LANGUAGE plpgsql
    SET enable_seqscan = off SET enable_bitmapscan = off SET enable_hashjoin = off
    SET enable_mergejoin = off SET jit = off SET lock_timeout = '1s'
    AS $$
DECLARE
    v_tids     TID[];
    v_accounts BIGINT[];
    v_locked   BIGINT[];
    v_addrs    TEXT[];
    v_mine     TEXT[];
    v_held     BIGINT[];
    v_taken    BIGINT[];
    v_at       BIGINT[];
    v_new      BIGINT[];
    v_new_at   BIGINT[];
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    SELECT array_agg(x.ctid), array_agg(x.account) INTO v_tids, v_accounts
      FROM (SELECT q.ctid, q.account FROM mailroom_signups q
             LIMIT p_limit FOR UPDATE SKIP LOCKED) x;
    IF v_tids IS NULL THEN
        RETURN 0;
    END IF;

    SELECT coalesce(array_agg(a.id), '{}'), coalesce(array_agg(lower(trim(a.email))), '{}')
      INTO v_locked, v_addrs
      FROM (SELECT a.id, a.email FROM accounts a WHERE a.id = ANY (v_accounts)
               FOR NO KEY UPDATE SKIP LOCKED) a;
    SELECT coalesce(array_agg(r.address), '{}') INTO v_mine
      FROM (SELECT r.address FROM mailroom_address_requests r
             WHERE r.address = ANY (v_addrs) AND r.action = 'activation'
               FOR UPDATE SKIP LOCKED) r;
    -- Held by another transaction: an existing account this call could not lock, or one whose
    -- address has a counter row this call could not lock.
    SELECT coalesce(array_agg(u.id), '{}') INTO v_held
      FROM unnest(v_accounts) AS u(id)
     CROSS JOIN LATERAL (SELECT a.email FROM accounts a WHERE a.id = u.id LIMIT 1) a
      LEFT JOIN LATERAL (SELECT r.address FROM mailroom_address_requests r
                          WHERE r.address = lower(trim(a.email)) AND r.action = 'activation'
                          LIMIT 1) r ON true
     WHERE u.id <> ALL (v_locked) OR (r.address IS NOT NULL AND r.address <> ALL (v_mine));

    WITH d AS (
        DELETE FROM mailroom_signups q
         WHERE q.ctid = ANY (v_tids) AND q.account <> ALL (v_held)
        RETURNING q.account, q.requested_at
    )
    SELECT array_agg(d.account), array_agg(d.requested_at) INTO v_taken, v_at FROM d;
    IF v_taken IS NULL THEN
        RETURN 0;
    END IF;

    SELECT array_agg(x.account ORDER BY x.address, x.at),
           array_agg(x.at ORDER BY x.address, x.at)
      INTO v_new, v_new_at
      FROM (SELECT u.account, u.at, lower(trim(a.email)) AS address
              FROM unnest(v_taken, v_at) AS u(account, at)
             CROSS JOIN LATERAL (SELECT a.email, a.status FROM accounts a
                                  WHERE a.id = u.account LIMIT 1) a
              LEFT JOIN LATERAL (SELECT l.id FROM tokens l
                                  WHERE l.account = u.account AND l.action = 'activation'
                                    AND l.consumed_at IS NULL
                                    AND l.expires_at > EXTRACT(EPOCH FROM now())
                                  LIMIT 1) l ON true
             WHERE a.status = 'provisioned' AND l.id IS NULL) x;
    IF v_new IS NOT NULL THEN
        INSERT INTO tokens (account, action, created_at)
        SELECT u.account, 'activation', u.at FROM unnest(v_new, v_new_at) AS u(account, at);
    END IF;
    RETURN cardinality(v_taken);
END;
$$;

DROP FUNCTION IF EXISTS mailroom_address_limit(TEXT[], BIGINT[], token_action, INT, INT);
DROP FUNCTION IF EXISTS mailroom_limit_reason(INT, token_action, TEXT, INT, INT);
DROP SEQUENCE mailroom_collection_xact;
