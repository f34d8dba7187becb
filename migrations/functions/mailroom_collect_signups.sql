-- Creates the activation tokens of up to p_limit queued signups (mailroom_signups) and returns
-- how many queued rows it took. Called by the collector, alone in autocommit, before its
-- dequeues: the tokens are committed before the dequeue's snapshot is taken, so that dequeue
-- hands them out.
--
-- Rows are taken in the table's physical order (the order they were queued, near enough) with
-- FOR UPDATE SKIP LOCKED, so collectors running at once take different rows, and deleted in the
-- same statement: a row is collected exactly once (a crash before the commit leaves it queued).
-- A token is created only for an account that still exists, is still 'provisioned' and has no
-- live activation token (one that an un-suspension created meanwhile); the others' rows are
-- dropped. The token's created_at is the time of the signup; its expiry runs from its creation
-- here (the tokens table's default). The abuse limits are decided by before_token_insert_limits,
-- as for a token the application inserts: under the account's row lock, and per address on
-- mailroom_address_requests in the order the rows are collected.
--
-- The commit is asynchronous: a crash of PostgreSQL loses the tokens and the deletion together.
CREATE OR REPLACE FUNCTION mailroom_collect_signups(p_limit INT) RETURNS INT
    LANGUAGE plpgsql
    SET enable_bitmapscan = off SET enable_sort = off SET jit = off
    AS $$
DECLARE
    v_taken INT;
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    WITH s AS (
        DELETE FROM mailroom_signups q
         WHERE q.ctid = ANY (ARRAY(SELECT x.ctid FROM mailroom_signups x
                                    LIMIT p_limit FOR UPDATE SKIP LOCKED))
        RETURNING q.account, q.requested_at
    ), t AS (
        INSERT INTO tokens (account, action, created_at)
        SELECT s.account, 'activation', s.requested_at
          FROM s JOIN accounts a ON a.id = s.account
         WHERE a.status = 'provisioned'
           AND NOT EXISTS (SELECT 1 FROM tokens l
                            WHERE l.account = s.account AND l.action = 'activation'
                              AND l.consumed_at IS NULL
                              AND l.expires_at > EXTRACT(EPOCH FROM now()))
        RETURNING 1
    )
    SELECT count(*) INTO v_taken FROM s;
    RETURN v_taken;
END;
$$;
