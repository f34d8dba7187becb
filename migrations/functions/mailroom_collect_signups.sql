-- Creates the activation tokens of up to p_limit queued signups (mailroom_signups) and returns
-- how many queued rows it took. Called by the collector, alone in autocommit, before its
-- dequeues: the tokens are committed before the dequeue's snapshot is taken, so that dequeue
-- hands them out.
--
-- Never waits for the application: rows are taken in the table's physical order (the order
-- they were queued, near enough) with FOR UPDATE SKIP LOCKED, so collectors running at once
-- take different rows; the accounts' rows and the existing counter rows of their addresses
-- (mailroom_address_requests) are locked with SKIP LOCKED too, and a signup whose account or
-- address another transaction holds (an application transaction that updated the account, or
-- inserted a recovery for the address, and is still open) stays queued for a later call. The
-- other rows are deleted: each is collected exactly once (a crash before the commit leaves it
-- queued). lock_timeout bounds the one wait left, a counter row for a new address that another
-- transaction is inserting at that moment.
--
-- A token is created only for an account that still exists, is still 'provisioned' and has no
-- live activation token (one an un-suspension created meanwhile); the others' rows are dropped.
-- The token's created_at is the time of the signup (the limits' windows are counted back from
-- it); its expiry runs from its creation here (the tokens table's default). The abuse limits are
-- decided by before_token_insert_limits, as for a token the application inserts; the tokens are
-- inserted in the order of their address and signup time, so two collectors meet address rows
-- in one order. Nothing is inserted when no token is due: a statement inserting no row would
-- still fire the wake-up's statement trigger.
--
-- Plans: the queue is read by the only path there is (a sequential scan stopped at p_limit;
-- the DELETE by ctid) and every other table by index probes per row (accounts' primary key,
-- the counters' primary key, the account's tokens by (account, action, created_at)), whatever
-- the statistics: each look-up of a collected row is a LATERAL subquery with LIMIT 1, which the
-- planner cannot turn into a join. With plain joins it read the whole of accounts (and of the
-- counters) on every call when the statistics were older than the table, so a call cost
-- O(accounts) and collection fell behind at 1,000 signups a second.
--
-- The commit is asynchronous, as the dequeue's: waiting for the WAL flush in every collecting
-- round put a disk flush between every signup and its stream. Any later synchronous commit (a
-- sender's acknowledgement) flushes it first, the WAL being sequential; a crash of PostgreSQL
-- within the WAL writer's delay (200 ms) of a collection loses its tokens and its deletions
-- together, so those signups are queued again and collected again, and an email sent in that
-- window carries a token that no longer exists: the user gets a second email whose token works.
-- A call that takes nothing writes nothing.
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
