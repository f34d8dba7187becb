-- Creates the activation tokens of up to p_limit queued signups (mailroom_signups) and returns
-- how many queued rows it took. Called by the collector, alone in autocommit, before its
-- dequeues: the tokens are committed before the dequeue's snapshot is taken, so that dequeue
-- hands them out.
--
-- Guarantees: each queued row becomes at most one token, exactly once, decided by the limits
-- trigger's rules; a call never waits for the application and takes nothing while another
-- collection runs. The reasoning (row taking, limits, plans, commit) is in docs/design.md,
-- "How a collection takes its rows".
CREATE OR REPLACE FUNCTION mailroom.mailroom_collect_signups(p_limit INT) RETURNS INT
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    SET enable_seqscan = off SET enable_bitmapscan = off SET enable_sort = off
    SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off SET lock_timeout = '1s'
    SET plan_cache_mode = force_generic_plan
    AS $$
DECLARE
    s          mailroom_settings%ROWTYPE;
    v_expiry   INT;
    v_tids     TID[];
    v_taken    BIGINT[];
    v_at       BIGINT[];
    -- The tokens to insert, in the order of address and signup time: the account, the signup's
    -- time, the address as the limits count it (mailroom_limit_address), and NULL or why it is
    -- rate limited.
    v_new      BIGINT[];
    v_new_at   BIGINT[];
    v_address  TEXT[];
    v_reason   TEXT[];
    -- One call of mailroom_address_limit: the places in those arrays, their addresses and
    -- times, and its answers; then the places of each later request of an address.
    v_round    BIGINT[];
    v_round_addresses TEXT[];
    v_round_at BIGINT[];
    v_decided  TEXT[];
    v_one      TEXT;
    v_k        INT;
    v_later    BIGINT[];
    v_i        BIGINT;
    -- The first call's ranges still to count (a stack of [lo, hi]), the calls that found a
    -- counter row being inserted elsewhere, and the addresses left queued for that.
    v_los      INT[];
    v_his      INT[];
    v_lo       INT;
    v_hi       INT;
    v_refused  INT := 0;
    v_busy     TEXT[] := '{}';
    v_lock_timeout TEXT;
    v_requeued INT := 0;
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    -- Nothing queued, or another collection running: return without writing anything. Turns
    -- are taken on the settings' row, which the application's role may read but not lock.
    PERFORM 1 FROM mailroom_signups LIMIT 1;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    SELECT * INTO s FROM mailroom_settings FOR NO KEY UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    -- The activation's rules (mailroom.actions) in the settings' fields this function reads.
    SELECT a.limit_per_account, a.limit_per_address,
           coalesce(a.limit_window_seconds, s.limit_window_seconds), a.expiry_seconds
      INTO s.activation_limit_per_account, s.activation_limit_per_address,
           s.limit_window_seconds, v_expiry
      FROM actions a WHERE a.name = 'activation';
    -- The queue in its physical order, each row's account locked (SKIP LOCKED) with the existing
    -- counter row of its address (mailroom_address_requests): a row whose account, or whose
    -- address's counter row, another transaction holds is passed over, and the scan goes on
    -- until p_limit rows are taken or the queue ends. One statement: the LIMIT stops the scan
    -- (and the locking) at the p_limit-th row taken, so a call reads the rows it takes and the
    -- held ones before them, not the whole queue.
    SELECT array_agg(x.ctid) INTO v_tids
      FROM (SELECT q.ctid
              FROM mailroom_signups q
              LEFT JOIN LATERAL (SELECT a.id, mailroom_limit_address(a.email) AS address
                                   FROM accounts a
                                  WHERE a.id = q.account
                                    FOR NO KEY UPDATE SKIP LOCKED) l ON true
              LEFT JOIN LATERAL (SELECT true AS held FROM accounts a
                                  WHERE l.id IS NULL AND a.id = q.account LIMIT 1) e ON true
              LEFT JOIN LATERAL (SELECT r.address FROM mailroom_address_requests r
                                  WHERE r.address = l.address AND r.action = 'activation'
                                    FOR UPDATE SKIP LOCKED) k ON true
              LEFT JOIN LATERAL (SELECT true AS held FROM mailroom_address_requests r
                                  WHERE k.address IS NULL AND r.address = l.address
                                    AND r.action = 'activation' LIMIT 1) c ON true
             WHERE e.held IS NULL AND c.held IS NULL
             LIMIT p_limit) x;
    IF v_tids IS NULL THEN
        RETURN 0;
    END IF;

    WITH d AS (
        DELETE FROM mailroom_signups q
         WHERE q.ctid = ANY (v_tids)
        RETURNING q.account, q.requested_at
    )
    SELECT array_agg(d.account), array_agg(d.requested_at) INTO v_taken, v_at FROM d;
    IF v_taken IS NULL THEN
        RETURN 0;
    END IF;

    -- The tokens due, one per account (its latest queued request: an earlier one is the same
    -- request made again), with the account's limit decided: its accepted activation requests
    -- in the window before the signup, at most the limit of them read, newest first.
    SELECT array_agg(x.account ORDER BY x.address, x.at, x.account),
           array_agg(x.at ORDER BY x.address, x.at, x.account),
           array_agg(x.address ORDER BY x.address, x.at, x.account),
           array_agg(x.reason ORDER BY x.address, x.at, x.account)
      INTO v_new, v_new_at, v_address, v_reason
      FROM (SELECT DISTINCT ON (u.account) u.account, u.at,
                   mailroom_limit_address(a.email) AS address,
                   CASE WHEN n.n >= s.activation_limit_per_account
                        THEN mailroom_limit_reason(n.n, 'activation', 'account',
                                                   s.limit_window_seconds,
                                                   s.activation_limit_per_account)
                   END AS reason
              FROM unnest(v_taken, v_at) AS u(account, at)
             CROSS JOIN LATERAL (SELECT a.email, a.status FROM accounts a
                                  WHERE a.id = u.account LIMIT 1) a
              LEFT JOIN LATERAL (SELECT l.id FROM tokens l
                                  WHERE l.account = u.account AND l.action = 'activation'
                                    AND l.consumed_at IS NULL
                                    AND l.expires_at > EXTRACT(EPOCH FROM now())
                                  ORDER BY l.created_at DESC
                                  LIMIT 1) l ON true
             CROSS JOIN LATERAL (
                   SELECT count(*)::INT AS n
                     FROM (SELECT 1 FROM tokens t
                            WHERE t.account = u.account AND t.action = 'activation'
                              AND t.created_at > u.at - s.limit_window_seconds
                              AND NOT t.rate_limited
                            ORDER BY t.created_at DESC
                            LIMIT s.activation_limit_per_account) c) n
             WHERE a.status = 'provisioned' AND l.id IS NULL
             ORDER BY u.account, u.at DESC) x;
    IF v_new IS NULL THEN
        RETURN cardinality(v_taken);
    END IF;

    -- The address's limit, for the requests the account's limit accepted: every address's first
    -- request in one call, then each later request for an address (accounts whose emails
    -- normalise to one address) in a call of its own, in order: linear in the batch, however
    -- its requests fall on addresses.
    IF s.activation_limit_per_address IS NOT NULL THEN
        -- The requests' places among their address's, fixed before any is decided here (the
        -- first call's refusals must not make a later request the first): every address's
        -- first request, and the later ones.
        SELECT array_agg(w.i ORDER BY w.i) FILTER (WHERE w.place = 1),
               array_agg(w.address ORDER BY w.i) FILTER (WHERE w.place = 1),
               array_agg(w.at ORDER BY w.i) FILTER (WHERE w.place = 1),
               array_agg(w.i ORDER BY w.i) FILTER (WHERE w.place > 1)
          INTO v_round, v_round_addresses, v_round_at, v_later
          FROM (SELECT u.i, u.address, u.at,
                       row_number() OVER (PARTITION BY u.address ORDER BY u.i) AS place
                  FROM unnest(v_address, v_new_at, v_reason)
                       WITH ORDINALITY AS u(address, at, reason, i)
                 WHERE u.reason IS NULL) w;
        -- The first call meets the counter rows of new addresses, which the scan could not
        -- lock: one that another transaction is inserting (not yet committed) would make its
        -- INSERT wait for that transaction. So it runs in a block with a lock_timeout of 1 ms;
        -- a block that times out is rolled back and its range split in two, each counted
        -- again, in order, until the address is found. That address's requests stay queued (at
        -- the end of this function); every other one is counted. Normally one block, no wait;
        -- for one such address in a batch of n, about 2 log2(n) blocks and log2(n) waits of
        -- 1 ms. After 16 blocks timed out, a range that times out is left queued whole: a call
        -- never waits more than about 50 ms in all.
        IF v_round IS NOT NULL THEN
            v_lock_timeout := current_setting('lock_timeout');
            PERFORM set_config('lock_timeout', '1ms', true);
            v_los := ARRAY[1];
            v_his := ARRAY[cardinality(v_round)];
            WHILE cardinality(v_los) > 0 LOOP
                v_lo := v_los[cardinality(v_los)];
                v_hi := v_his[cardinality(v_his)];
                v_los := v_los[1:cardinality(v_los) - 1];
                v_his := v_his[1:cardinality(v_his) - 1];
                BEGIN
                    v_decided := mailroom_address_limit(v_round_addresses[v_lo:v_hi],
                                                        v_round_at[v_lo:v_hi], 'activation',
                                                        s.activation_limit_per_address,
                                                        s.limit_window_seconds);
                    v_k := v_lo - 1;
                    FOREACH v_one IN ARRAY v_decided LOOP
                        v_k := v_k + 1;
                        v_reason[v_round[v_k]] := v_one;
                    END LOOP;
                EXCEPTION WHEN lock_not_available THEN
                    v_refused := v_refused + 1;
                    IF v_lo = v_hi OR v_refused > 16 THEN
                        v_busy := v_busy || v_round_addresses[v_lo:v_hi];
                    ELSE
                        -- The left half is on top: the ranges are counted in the arrays' order.
                        v_los := v_los || (v_lo + v_hi) / 2 + 1 || v_lo;
                        v_his := v_his || v_hi || (v_lo + v_hi) / 2;
                    END IF;
                END;
            END LOOP;
            PERFORM set_config('lock_timeout', v_lock_timeout, true);
        END IF;
        -- A later request's address had its first one counted above (its row is locked now),
        -- or is left queued.
        FOREACH v_i IN ARRAY coalesce(v_later, '{}') LOOP
            CONTINUE WHEN v_address[v_i] = ANY (v_busy);
            v_reason[v_i] := (mailroom_address_limit(ARRAY[v_address[v_i]], ARRAY[v_new_at[v_i]],
                                                     'activation',
                                                     s.activation_limit_per_address,
                                                     s.limit_window_seconds))[1];
        END LOOP;
        -- The requests of an address whose counter row is being inserted elsewhere are queued
        -- again (each account's latest, as collected), for a later call; no token is made.
        IF cardinality(v_busy) > 0 THEN
            INSERT INTO mailroom_signups (account, requested_at)
            SELECT u.account, u.at FROM unnest(v_new, v_new_at, v_address) AS u(account, at, address)
             WHERE u.address = ANY (v_busy);
            GET DIAGNOSTICS v_requeued = ROW_COUNT;
            SELECT array_agg(u.account ORDER BY u.i), array_agg(u.at ORDER BY u.i),
                   array_agg(u.address ORDER BY u.i), array_agg(u.reason ORDER BY u.i)
              INTO v_new, v_new_at, v_address, v_reason
              FROM unnest(v_new, v_new_at, v_address, v_reason)
                   WITH ORDINALITY AS u(account, at, address, reason, i)
             WHERE u.address <> ALL (v_busy);
            IF v_new IS NULL THEN
                RETURN cardinality(v_taken) - v_requeued;
            END IF;
        END IF;
    END IF;

    -- The mark is this transaction's id for the INSERT only: cleared at once, whether it
    -- succeeds or fails (a sequence is not transactional), so nothing else this transaction
    -- inserts skips the limits.
    PERFORM setval('mailroom_collection_xact', pg_current_xact_id()::TEXT::BIGINT);
    BEGIN
        -- The tokens' foreign key is checked at the INSERT's end, inside this function, so that
        -- a session whose first checks are made here (a collector's: it inserts tokens nowhere
        -- else) plans them with this function's settings, an index probe of accounts.
        -- PostgreSQL keeps one plan of the check per session; made at the commit with the
        -- session's settings while accounts was analysed empty, it read the whole table for
        -- every token until the next ANALYZE of accounts. Checks the caller's transaction left
        -- pending run here too; a failure of any rolls this block back, the setting with it.
        SET CONSTRAINTS tokens_account_fkey IMMEDIATE;
        INSERT INTO tokens (account, action, priority, created_at, expires_at, address,
                            rate_limited, suppressed_reason)
        SELECT u.account, 'activation', 'normal', u.at,
               EXTRACT(EPOCH FROM now())::BIGINT + v_expiry, lower(btrim(a.email)),
               u.reason IS NOT NULL, u.reason
          FROM unnest(v_new, v_new_at, v_address, v_reason) AS u(account, at, address, reason)
          JOIN accounts a ON a.id = u.account;
    EXCEPTION WHEN OTHERS THEN
        -- A failed INSERT (or check) clears the mark too (a caller that carries on in its
        -- transaction).
        PERFORM setval('mailroom_collection_xact', 0, false);
        RAISE;
    END;
    -- Deferred again for the rest of the caller's transaction, whatever it had set.
    SET CONSTRAINTS tokens_account_fkey DEFERRED;
    PERFORM setval('mailroom_collection_xact', 0, false);
    RETURN cardinality(v_taken) - v_requeued;
END;
$$;
