-- The abuse limits per address without counting rows or holding a lock per address.
--
-- Before: the token trigger took a transaction-level advisory lock per address and counted the
-- address's recent requests in tokens_limit_address_idx. A transaction inserting many accounts
-- (an import: INSERT ... SELECT, COPY) held one lock per address until it ended and ran out of
-- the shared lock table ("out of shared memory", max_locks_per_transaction) at about 20,000
-- rows with PostgreSQL's default settings.
--
-- Now each (address, action) has one row in mailroom_address_requests holding the creation
-- times of its newest accepted requests (at most the limit). The trigger decides with one
-- INSERT ... ON CONFLICT DO UPDATE on that row: a new address inserts it, a known one appends
-- the request's time only while fewer than the limit fall inside the window (the WHERE of the
-- DO UPDATE), and no row returned means the request is over the limit. The row's lock (a row
-- lock, kept in the row, not in the lock table) serialises concurrent requests for one
-- address as the advisory lock did: a second transaction waits for the first's insert or
-- update and then sees its committed times (READ COMMITTED; under REPEATABLE READ the second
-- fails with a serialization error instead of slipping past the limit).
--
-- Exactness: keeping the newest `limit` accepted times is enough to tell whether `limit` of
-- them fall in any window, so the counter agrees with counting rows for any window setting.
-- Raising a limit counts, for each address, at most the old limit's newest requests made
-- before the change; deleting tokens (retention, an account deleted) does not take requests
-- back out of the window; a limit that was NULL (no limit) counts requests from when it is set.
--
-- Also:
--  * The account's own limit still counts its tokens in tokens_limit_account_idx under the
--    account's row lock, but not for an account inserted in this statement (its activation
--    token comes from the account's BEFORE INSERT trigger): it has no earlier request.
--  * The trigger's statements keep their index plans whatever the statistics say (tables
--    ANALYZEd empty before an import made the generic plans read whole tables per row):
--    enable_seqscan, enable_bitmapscan and enable_sort are off in the function, and so is jit
--    (the cost a disabled scan adds to the settings row's read would otherwise make every
--    statement of the trigger JIT-compiled, about 200 ms each).
--  * tokens_limit_address_idx is dropped: nothing reads it any more.
--  * mailroom_prune_address_requests deletes the rows whose newest request left the window
--    (the collector's retention pass).

CREATE TABLE mailroom_address_requests (
    address TEXT NOT NULL,           -- lower(trim(email)), as tokens.address
    action  token_action NOT NULL,
    times   BIGINT[] NOT NULL,       -- created_at of the newest accepted requests (<= limit)
    PRIMARY KEY (address, action)
) WITH (fillfactor = 80);            -- room for HOT updates: `times` is not indexed

INSERT INTO mailroom_address_requests (address, action, times)
SELECT t.address, t.action, array_agg(t.created_at ORDER BY t.created_at)
  FROM tokens t CROSS JOIN mailroom_settings s
 WHERE t.address IS NOT NULL AND NOT t.rate_limited
   AND t.created_at > EXTRACT(EPOCH FROM now())::BIGINT - s.limit_window_seconds
 GROUP BY t.address, t.action;

DROP INDEX tokens_limit_address_idx;

CREATE OR REPLACE FUNCTION trg_before_token_insert_limits() RETURNS TRIGGER
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
    v_counted    BOOLEAN;
BEGIN
    SELECT * INTO s FROM mailroom_settings;
    v_since := EXTRACT(EPOCH FROM now())::BIGINT - s.limit_window_seconds;
    IF NEW.action = 'password_recovery' THEN
        v_acct_limit := s.recovery_limit_per_account;
        v_addr_limit := s.recovery_limit_per_address;
    ELSE
        v_acct_limit := s.activation_limit_per_account;
        v_addr_limit := s.activation_limit_per_address;
    END IF;

    -- The account's row lock serialises requests for one account. The row is missing when the
    -- account is being inserted in this statement: then only the inserter's address is known,
    -- and the account has no earlier request to count.
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
        IF v_addr_limit > 0 THEN
            INSERT INTO mailroom_address_requests AS r (address, action, times)
            VALUES (NEW.address, NEW.action, ARRAY[NEW.created_at])
            ON CONFLICT (address, action) DO UPDATE
               SET times = ARRAY(SELECT x FROM unnest(r.times) x
                                  ORDER BY x DESC LIMIT v_addr_limit - 1) || NEW.created_at
             WHERE (SELECT count(*) FROM unnest(r.times) x WHERE x > v_since) < v_addr_limit
            RETURNING true INTO v_counted;
        END IF;
        IF v_counted IS NULL THEN
            NEW.rate_limited := true;
            NEW.suppressed_reason := format(
                'rate limited: %s %s requests for this address in the last %s s (limit %s)',
                v_addr_limit, NEW.action, s.limit_window_seconds, v_addr_limit);
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

-- Deletes, in the table's blocks [p_after, p_after + p_batch / 32 + 1), the rows whose newest
-- request is older than the window: they can no longer limit anything. Returns the rows
-- deleted, the next block and whether blocks remain (the shape the retention pass pages with).
CREATE FUNCTION mailroom_prune_address_requests(p_after BIGINT, p_batch INT)
    RETURNS TABLE (deleted BIGINT, next_after BIGINT, more BOOLEAN)
    LANGUAGE plpgsql AS $$
DECLARE
    v_since BIGINT := EXTRACT(EPOCH FROM now())::BIGINT
                      - (SELECT limit_window_seconds FROM mailroom_settings);
    v_next  BIGINT := p_after + p_batch / 32 + 1;
BEGIN
    DELETE FROM mailroom_address_requests r
     WHERE r.ctid >= format('(%s,0)', p_after)::TID AND r.ctid < format('(%s,0)', v_next)::TID
       AND (SELECT max(x) FROM unnest(r.times) x) <= v_since;
    GET DIAGNOSTICS deleted = ROW_COUNT;
    next_after := v_next;
    more := v_next < pg_relation_size('mailroom_address_requests')
                     / current_setting('block_size')::BIGINT;
    RETURN NEXT;
END;
$$;
