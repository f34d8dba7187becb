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
--
-- The trigger function and the pruning function are in migrations/functions/.

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
