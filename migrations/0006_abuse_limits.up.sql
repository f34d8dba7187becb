-- Limits against email bombing and budget exhaustion (issue 11 §3).
--
-- One script requesting "forgot password" in a loop can flood a victim's inbox and spend the
-- month's budget in minutes. Two rules, decided in PostgreSQL when a token is inserted, so they
-- hold for any number of collectors and senders and for every consumer group alike:
--
--  * At most one pending password recovery per account: a newer request supersedes the older
--    ones (tokens.superseded_by, tokens.suppressed_reason). A group that has not handed the old
--    token out yet records it as `superseded` and never sends or charges it; a job already
--    leased may still go out, but one that comes due again (lease ran out, retry) ends
--    `superseded` instead of being handed out again.
--  * At most N requests per action in a rolling window (24 h by default), per account and per
--    address (the normalised email, lower(trim(email)), across accounts). A request over a
--    limit is marked rate_limited on its row at insert; every group records it as
--    `rate_limited` with the reason, and it is never sent or charged. Rate-limited requests do
--    not supersede anything (a flood cannot push out the one legitimate pending email) and do
--    not count towards the limit.
--
-- Limits live in mailroom_settings (NULL: no limit). Counting is one range scan of a partial
-- index on (account | address, action, created_at) stopped at the limit: O(log n + limit).
-- Concurrent requests for the same account or address are serialised by a row lock on the
-- account and a transaction-level advisory lock on the address, taken before counting, so two
-- transactions cannot both slip under a limit (under READ COMMITTED each statement of the
-- trigger sees what the other committed once it has the lock).
--
-- New delivery states: ALTER TYPE ... ADD VALUE may run in the migration's transaction, but the
-- values cannot be used until it commits. They are only named inside plpgsql bodies (parsed at
-- their first call) and compared as text in the SQL-language mailroom_stats.

ALTER TYPE delivery_state ADD VALUE IF NOT EXISTS 'superseded';
ALTER TYPE delivery_state ADD VALUE IF NOT EXISTS 'rate_limited';

ALTER TABLE mailroom_settings
    ADD COLUMN recovery_limit_per_account   INT DEFAULT 5 CHECK (recovery_limit_per_account >= 0),
    ADD COLUMN recovery_limit_per_address   INT DEFAULT 5 CHECK (recovery_limit_per_address >= 0),
    ADD COLUMN activation_limit_per_account INT DEFAULT 3
        CHECK (activation_limit_per_account >= 0),
    ADD COLUMN activation_limit_per_address INT DEFAULT 3
        CHECK (activation_limit_per_address >= 0),
    ADD COLUMN limit_window_seconds         INT NOT NULL DEFAULT 86400
        CHECK (limit_window_seconds > 0);

ALTER TABLE tokens
    -- The normalised address the request was for (lower(trim(accounts.email)) at insert).
    ADD COLUMN address           TEXT,
    -- Over a limit at insert: never handed out.
    ADD COLUMN rate_limited      BOOLEAN NOT NULL DEFAULT false,
    -- A newer password recovery of the same account: not handed out any more.
    ADD COLUMN superseded_by     BIGINT,
    -- Why the token is not to be sent (rate_limited or superseded_by set).
    ADD COLUMN suppressed_reason TEXT;

-- Tokens inside the window count; the trigger only needs those created since now - window.
UPDATE tokens t SET address = lower(trim(a.email))
  FROM accounts a
 WHERE a.id = t.account
   AND t.created_at > EXTRACT(EPOCH FROM now())::BIGINT - 86400;

CREATE INDEX tokens_limit_account_idx ON tokens (account, action, created_at)
    WHERE NOT rate_limited;
CREATE INDEX tokens_limit_address_idx ON tokens (address, action, created_at)
    WHERE NOT rate_limited;
-- The pending recoveries of an account (at most one once the trigger runs: superseding an
-- older one takes it out of this index).
CREATE INDEX tokens_pending_recovery_idx ON tokens (account)
    WHERE action = 'password_recovery' AND superseded_by IS NULL AND NOT rate_limited
      AND consumed_at IS NULL;
CREATE INDEX accounts_address_idx ON accounts (lower(trim(email)));

CREATE FUNCTION trg_before_token_insert_limits() RETURNS TRIGGER
    LANGUAGE plpgsql AS $$
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

CREATE TRIGGER before_token_insert_limits
    BEFORE INSERT ON tokens
    FOR EACH ROW
    EXECUTE FUNCTION trg_before_token_insert_limits();

-- The activation token of a new account: its row is not there yet, so the address is passed.
CREATE OR REPLACE FUNCTION trg_before_account_insert() RETURNS TRIGGER
    LANGUAGE plpgsql AS $$
BEGIN
    IF (NEW.status = 'provisioned') THEN
        INSERT INTO tokens (account, action, address)
        VALUES (NEW.id, 'activation', lower(trim(NEW.email)));
    END IF;
    RETURN NEW;
END;
$$;

-- 0005's mailroom_dequeue with the same signature and scan; only its filters change: tokens
-- marked superseded or rate limited are recorded with that state and the token's reason, in
-- the new-token window and when a leased or retried job comes due again.
CREATE OR REPLACE FUNCTION mailroom_dequeue(p_group TEXT, p_limit INT, p_owner TEXT, p_lease_ms INT)
    RETURNS TABLE (job_id BIGINT, action token_action, email TEXT, login TEXT, secret BYTEA,
                   code TEXT, expires_at BIGINT, account_id BIGINT, attempt INT, failures INT,
                   created_at BIGINT, locale TEXT)
    LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    g          consumer_groups%ROWTYPE;
    v_due      TIMESTAMPTZ := now() + make_interval(secs => p_lease_ms / 1000.0);
    v_now      BIGINT := EXTRACT(EPOCH FROM now())::BIGINT;
    v_left     INT := p_limit;
    v_opened   BOOLEAN := FALSE;
    v_ids      BIGINT[];
    v_txids    XID8[];
    v_actions  token_action[];
    v_emails   TEXT[];
    v_logins   TEXT[];
    v_secrets  BYTEA[];
    v_codes    TEXT[];
    v_expires  BIGINT[];
    v_accounts BIGINT[];
    v_created  BIGINT[];
    v_locales  TEXT[];
    v_ok       BOOLEAN[];
    v_skip     TEXT[];
    v_reasons  TEXT[];
    v_count    INT;
    v_returned INT;
BEGIN
    SELECT * INTO g FROM consumer_groups WHERE name = p_group FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown consumer group "%"', p_group USING ERRCODE = 'no_data_found';
    END IF;

    -- 1. Jobs due again.
    WITH due AS (
        SELECT d.token_id FROM deliveries d
         WHERE d.group_id = g.id AND d.state IN ('leased', 'retry') AND d.due_at <= now()
         ORDER BY d.due_at LIMIT v_left
           FOR UPDATE SKIP LOCKED
    ), upd AS (
        UPDATE deliveries d
           SET lost_leases = d.lost_leases + (d.state = 'leased' AND NOT d.holder_left)::INT,
               attempts = d.attempts + 1, state = 'leased', owner = p_owner, due_at = v_due,
               holder_left = false, updated_at = now()
          FROM due
         WHERE d.group_id = g.id AND d.token_id = due.token_id
        RETURNING d.token_id
    )
    SELECT array_agg(token_id) INTO v_ids FROM upd;

    IF v_ids IS NOT NULL THEN
        -- Finish those that must not be sent any more.
        UPDATE deliveries d
           SET state = x.st, reason = x.why, owner = NULL, due_at = NULL, updated_at = now()
          FROM (SELECT d2.token_id,
                       CASE WHEN d2.lost_leases >= g.max_lost_leases THEN 'failed'
                            WHEN t.id IS NULL THEN 'cancelled'
                            WHEN t.superseded_by IS NOT NULL THEN 'superseded'
                            WHEN t.rate_limited THEN 'rate_limited'
                            WHEN t.expires_at <= v_now THEN 'expired'
                            WHEN NOT mailroom_token_sendable(t, a.status, v_now) THEN 'cancelled'
                       END::delivery_state AS st,
                       CASE WHEN d2.lost_leases >= g.max_lost_leases
                                 THEN format('lease ran out %s times without an outcome',
                                             d2.lost_leases)
                            WHEN t.id IS NULL THEN 'token deleted'
                            WHEN t.superseded_by IS NOT NULL OR t.rate_limited
                                 THEN t.suppressed_reason
                            WHEN t.expires_at <= v_now THEN 'token expired before delivery'
                            ELSE 'token consumed or account status changed'
                       END AS why
                  FROM deliveries d2
                  LEFT JOIN tokens t ON t.id = d2.token_id
                  LEFT JOIN accounts a ON a.id = t.account
                 WHERE d2.group_id = g.id AND d2.token_id = ANY (v_ids)) x
         WHERE d.group_id = g.id AND d.token_id = x.token_id AND x.st IS NOT NULL;

        RETURN QUERY
        SELECT t.id, t.action, a.email::TEXT, a.login::TEXT, t.secret, t.code::TEXT,
               t.expires_at, t.account, d.attempts, d.failures, t.created_at, a.locale
          FROM deliveries d
          JOIN tokens t ON t.id = d.token_id
          JOIN accounts a ON a.id = t.account
         WHERE d.group_id = g.id AND d.token_id = ANY (v_ids) AND d.state = 'leased';
        GET DIAGNOSTICS v_returned = ROW_COUNT;
        v_left := v_left - v_returned;
    END IF;

    -- 2. New tokens, window by window.
    WHILE v_left > 0 LOOP
        IF g.cur_snapshot IS NULL THEN
            EXIT WHEN v_opened;  -- at most one fresh window per call
            g.cur_snapshot := pg_current_snapshot();
            g.pos_txid := pg_snapshot_xmin(g.prev_snapshot);
            g.pos_id := 0;
            v_opened := TRUE;
        END IF;

        -- One pass over the window (index range scan on (txid, id)) collects everything the
        -- jobs need; the lease rows are written from it without looking the tokens up again.
        SELECT array_agg(w.id), array_agg(w.txid), array_agg(w.action), array_agg(w.email),
               array_agg(w.login), array_agg(w.secret), array_agg(w.code),
               array_agg(w.expires_at), array_agg(w.account), array_agg(w.created_at),
               array_agg(w.ok), array_agg(w.skip), array_agg(w.locale),
               array_agg(w.suppressed_reason)
          INTO v_ids, v_txids, v_actions, v_emails, v_logins, v_secrets, v_codes, v_expires,
               v_accounts, v_created, v_ok, v_skip, v_locales, v_reasons
          FROM (SELECT t.id, t.txid, t.action, a.email::TEXT AS email, a.login::TEXT AS login,
                       t.secret, t.code::TEXT AS code, t.expires_at, t.account, t.created_at,
                       a.locale, s.ok, t.suppressed_reason,
                       CASE WHEN s.ok THEN NULL
                            WHEN t.superseded_by IS NOT NULL THEN 'superseded'
                            WHEN t.rate_limited THEN 'rate_limited'
                            WHEN t.expires_at <= v_now THEN 'expired'
                            WHEN t.consumed_at IS NOT NULL THEN 'consumed'
                            ELSE a.status::TEXT END AS skip
                  FROM tokens t JOIN accounts a ON a.id = t.account
                 CROSS JOIN LATERAL (SELECT mailroom_token_sendable(t, a.status, v_now)
                                           AND t.superseded_by IS NULL
                                           AND NOT t.rate_limited AS ok) s
                 WHERE (t.txid, t.id) > (g.pos_txid, g.pos_id)
                   AND t.txid < pg_snapshot_xmax(g.cur_snapshot)
                   AND pg_visible_in_snapshot(t.txid, g.cur_snapshot)
                   AND NOT pg_visible_in_snapshot(t.txid, g.prev_snapshot)
                 ORDER BY t.txid, t.id
                 LIMIT v_left) w;
        v_count := coalesce(array_length(v_ids, 1), 0);

        IF v_count > 0 THEN
            RETURN QUERY
            WITH r AS (
                SELECT * FROM unnest(v_ids, v_actions, v_emails, v_logins, v_secrets, v_codes,
                                     v_expires, v_accounts, v_created, v_ok, v_locales)
                           AS r(id, action, email, login, secret, code, expires_at, account,
                                created_at, ok, locale)
                 WHERE r.ok
            ), ins AS (
                INSERT INTO deliveries (group_id, token_id, state, owner, due_at)
                SELECT g.id, r.id, 'leased', p_owner, v_due FROM r
                ON CONFLICT DO NOTHING
                RETURNING token_id
            )
            SELECT r.id, r.action, r.email, r.login, r.secret, r.code, r.expires_at, r.account,
                   1, 0, r.created_at, r.locale
              FROM r JOIN ins ON ins.token_id = r.id;
            GET DIAGNOSTICS v_returned = ROW_COUNT;

            -- Tokens not to send are recorded too, so that every token of the group ends with
            -- an outcome and a reason (seed 001's filters: expired, consumed, wrong status;
            -- and the abuse limits decided when the token was inserted).
            IF FALSE = ANY (v_ok) THEN
                INSERT INTO deliveries (group_id, token_id, state, attempts, reason)
                SELECT g.id, x.id,
                       (CASE WHEN x.why IN ('expired', 'superseded', 'rate_limited') THEN x.why
                             ELSE 'cancelled' END)::delivery_state,
                       0,
                       CASE x.why WHEN 'expired' THEN 'token expired before delivery'
                                  WHEN 'consumed' THEN 'token consumed before delivery'
                                  WHEN 'superseded' THEN x.reason
                                  WHEN 'rate_limited' THEN x.reason
                                  ELSE format('%s token for an account that is %s', x.action, x.why)
                       END
                  FROM unnest(v_ids, v_skip, v_actions, v_reasons) AS x(id, why, action, reason)
                 WHERE x.why IS NOT NULL
                ON CONFLICT DO NOTHING;
            END IF;
        ELSE
            v_returned := 0;
        END IF;

        IF v_count < v_left THEN
            -- Window exhausted: its upper snapshot becomes the lower bound.
            g.prev_snapshot := g.cur_snapshot;
            g.cur_snapshot := NULL;
            g.pos_txid := NULL;
            g.pos_id := NULL;
        ELSE
            g.pos_txid := v_txids[v_count];
            g.pos_id := v_ids[v_count];
        END IF;
        v_left := v_left - v_returned;
    END LOOP;

    UPDATE consumer_groups
       SET prev_snapshot = g.prev_snapshot, cur_snapshot = g.cur_snapshot,
           pos_txid = g.pos_txid, pos_id = g.pos_id
     WHERE id = g.id;
END;
$$;
-- mailroom_stats gains the two states (its RETURNS TABLE changes: dropped and created again).
-- States are compared as text: the new enum values cannot be used in this transaction.
DROP FUNCTION mailroom_stats(TEXT);
CREATE FUNCTION mailroom_stats(p_group TEXT)
    RETURNS TABLE (group_name TEXT, depth BIGINT, lag_seconds DOUBLE PRECISION,
                   in_flight BIGINT, waiting_retry BIGINT, sent BIGINT, failed BIGINT,
                   expired BIGINT, cancelled BIGINT, superseded BIGINT, rate_limited BIGINT)
    LANGUAGE sql STABLE AS $$
    SELECT g.name, w.depth,
           CASE WHEN w.depth = 0 THEN 0
                ELSE greatest(0, EXTRACT(EPOCH FROM now()) - w.oldest) END,
           d.in_flight, d.waiting_retry, d.sent, d.failed, d.expired, d.cancelled,
           d.superseded, d.rate_limited
      FROM consumer_groups g
      CROSS JOIN LATERAL (
          SELECT count(*) AS depth, min(t.created_at) AS oldest
            FROM tokens t
           WHERE t.txid >= pg_snapshot_xmin(g.prev_snapshot)
             AND NOT pg_visible_in_snapshot(t.txid, g.prev_snapshot)
             AND (g.cur_snapshot IS NULL
                  OR NOT pg_visible_in_snapshot(t.txid, g.cur_snapshot)
                  OR (t.txid, t.id) > (g.pos_txid, g.pos_id))) w
      CROSS JOIN LATERAL (
          SELECT count(*) FILTER (WHERE x.state::TEXT = 'leased') AS in_flight,
                 count(*) FILTER (WHERE x.state::TEXT = 'retry') AS waiting_retry,
                 count(*) FILTER (WHERE x.state::TEXT = 'sent') AS sent,
                 count(*) FILTER (WHERE x.state::TEXT = 'failed') AS failed,
                 count(*) FILTER (WHERE x.state::TEXT = 'expired') AS expired,
                 count(*) FILTER (WHERE x.state::TEXT = 'cancelled') AS cancelled,
                 count(*) FILTER (WHERE x.state::TEXT = 'superseded') AS superseded,
                 count(*) FILTER (WHERE x.state::TEXT = 'rate_limited') AS rate_limited
            FROM deliveries x WHERE x.group_id = g.id) d
     WHERE p_group IS NULL OR p_group = '' OR g.name = p_group
     ORDER BY g.name;
$$;
