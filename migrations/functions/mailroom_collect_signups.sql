-- Creates the activation tokens of up to p_limit queued signups (mailroom_signups) and returns
-- how many queued rows it took. Called by the collector, alone in autocommit, before its
-- dequeues: the tokens are committed before the dequeue's snapshot is taken, so that dequeue
-- hands them out.
--
-- Guarantees: each queued row becomes at most one token, exactly once, decided by the limits
-- trigger's rules; a call never waits for the application and takes nothing while another
-- collection runs. In parts: the rows taken (mailroom_collect_take), the tokens due with the
-- account's limit (mailroom_collect_due), the address's limit (mailroom_collect_address_limits),
-- the INSERT (mailroom_collect_insert); the requests of an address whose counter row another
-- transaction is inserting are queued again. The reasoning (row taking, limits, plans, commit)
-- is in docs/design.md, "How a collection takes its rows".
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
    v_taken    BIGINT[];
    v_at       BIGINT[];
    -- The tokens to insert, in the order of address and signup time: the account, the signup's
    -- time, the address as the limits count it, and NULL or why it is rate limited.
    v_new      BIGINT[];
    v_new_at   BIGINT[];
    v_address  TEXT[];
    v_reason   TEXT[];
    v_busy     TEXT[] := '{}';
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
    SELECT * INTO v_taken, v_at FROM mailroom_collect_take(p_limit);
    IF v_taken IS NULL THEN
        RETURN 0;
    END IF;
    SELECT * INTO v_new, v_new_at, v_address, v_reason
      FROM mailroom_collect_due(v_taken, v_at, s.activation_limit_per_account,
                                s.limit_window_seconds);
    IF v_new IS NULL THEN
        RETURN cardinality(v_taken);
    END IF;
    IF s.activation_limit_per_address IS NOT NULL THEN
        SELECT * INTO v_reason, v_busy
          FROM mailroom_collect_address_limits(v_address, v_new_at, v_reason,
                                               s.activation_limit_per_address,
                                               s.limit_window_seconds);
        -- The requests of an address whose counter row is being inserted elsewhere are queued
        -- again (each account's latest, as collected), for a later call; no token is made.
        IF cardinality(v_busy) > 0 THEN
            INSERT INTO mailroom_signups (account, requested_at)
            SELECT u.account, u.at FROM unnest(v_new, v_new_at, v_address) AS u(account, at, address)
             WHERE u.address = ANY (v_busy);
            GET DIAGNOSTICS v_requeued = ROW_COUNT;
            SELECT array_agg(u.account ORDER BY u.i), array_agg(u.at ORDER BY u.i),
                   array_agg(u.reason ORDER BY u.i)
              INTO v_new, v_new_at, v_reason
              FROM unnest(v_new, v_new_at, v_address, v_reason)
                   WITH ORDINALITY AS u(account, at, address, reason, i)
             WHERE u.address <> ALL (v_busy);
            IF v_new IS NULL THEN
                RETURN cardinality(v_taken) - v_requeued;
            END IF;
        END IF;
    END IF;
    PERFORM mailroom_collect_insert(v_new, v_new_at, v_reason, v_expiry);
    RETURN cardinality(v_taken) - v_requeued;
END;
$$;
