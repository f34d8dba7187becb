-- The third part of mailroom_collect_signups: the address's limit for the requests the
-- account's limit accepted (p_reasons NULL), in the arrays' order (p_addresses sorted):
-- every address's first request in one call of mailroom_address_limit, then each later request
-- for an address (accounts whose emails normalise to one address) in a call of its own, in
-- order: linear in the batch, however its requests fall on addresses. Returns p_reasons with
-- the rate-limited ones added, and the addresses whose counter row another transaction is
-- inserting (o_busy): their requests are not decided here. The first call meets the counter
-- rows of new addresses, which the take could not lock: one being inserted elsewhere would make
-- its INSERT wait for that transaction. So it runs in a block with a lock_timeout of 1 ms; a
-- block that times out is rolled back and its range split in two, each counted again, in
-- order, until the address is found. Normally one block, no wait; for one such address in a
-- batch of n, about 2 log2(n) blocks and log2(n) waits of 1 ms. After 16 blocks timed out, a
-- range that times out is left busy whole: a call never waits more than about 50 ms in all.
-- Called by mailroom_collect_signups only: its statements are planned under that function's
-- settings.
CREATE OR REPLACE FUNCTION mailroom.mailroom_collect_address_limits(p_addresses text[], p_ats bigint[], p_reasons text[], p_limit_per_address integer, p_window integer, OUT o_reasons text[], OUT o_busy text[])
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
DECLARE
    -- The places of every address's first request, their addresses and times; the decisions
    -- of one call; the places of the later requests; the ranges still to count (a stack of
    -- [lo, hi]).
    v_round     BIGINT[];
    v_addresses TEXT[];
    v_ats       BIGINT[];
    v_decided   TEXT[];
    v_one       TEXT;
    v_k         INT;
    v_later     BIGINT[];
    v_i         BIGINT;
    v_los       INT[];
    v_his       INT[];
    v_lo        INT;
    v_hi        INT;
    v_refused   INT := 0;
    v_lock_timeout TEXT;
BEGIN
    o_reasons := p_reasons;
    o_busy := '{}';
    -- The requests' places among their address's, fixed before any is decided here (the first
    -- call's refusals must not make a later request the first).
    SELECT array_agg(w.i ORDER BY w.i) FILTER (WHERE w.place = 1),
           array_agg(w.address ORDER BY w.i) FILTER (WHERE w.place = 1),
           array_agg(w.at ORDER BY w.i) FILTER (WHERE w.place = 1),
           array_agg(w.i ORDER BY w.i) FILTER (WHERE w.place > 1)
      INTO v_round, v_addresses, v_ats, v_later
      FROM (SELECT u.i, u.address, u.at,
                   row_number() OVER (PARTITION BY u.address ORDER BY u.i) AS place
              FROM unnest(p_addresses, p_ats, p_reasons)
                   WITH ORDINALITY AS u(address, at, reason, i)
             WHERE u.reason IS NULL) w;
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
                v_decided := mailroom_address_limit(v_addresses[v_lo:v_hi], v_ats[v_lo:v_hi],
                                                    'activation', p_limit_per_address, p_window);
                v_k := v_lo - 1;
                FOREACH v_one IN ARRAY v_decided LOOP
                    v_k := v_k + 1;
                    o_reasons[v_round[v_k]] := v_one;
                END LOOP;
            EXCEPTION WHEN lock_not_available THEN
                v_refused := v_refused + 1;
                IF v_lo = v_hi OR v_refused > 16 THEN
                    o_busy := o_busy || v_addresses[v_lo:v_hi];
                ELSE
                    -- The left half is on top: the ranges are counted in the arrays' order.
                    v_los := v_los || (v_lo + v_hi) / 2 + 1 || v_lo;
                    v_his := v_his || v_hi || (v_lo + v_hi) / 2;
                END IF;
            END;
        END LOOP;
        PERFORM set_config('lock_timeout', v_lock_timeout, true);
    END IF;
    -- A later request's address had its first one counted above (its row is locked now), or is
    -- busy.
    FOREACH v_i IN ARRAY coalesce(v_later, '{}') LOOP
        CONTINUE WHEN p_addresses[v_i] = ANY (o_busy);
        o_reasons[v_i] := (mailroom_address_limit(ARRAY[p_addresses[v_i]], ARRAY[p_ats[v_i]],
                                                  'activation', p_limit_per_address,
                                                  p_window))[1];
    END LOOP;
END;
$$;
