-- The abuse limit per address: counts a request of p_action for p_address made at p_at in its
-- mailroom_address_requests row unless p_limit accepted requests already fall in the last
-- p_window seconds before p_at. Returns NULL when the request is accepted (counted), else the
-- rate-limited reason. One INSERT ... ON CONFLICT DO UPDATE: a new address inserts its row, a
-- known one appends the time only while fewer than the limit fall in the window (the WHERE of
-- the DO UPDATE); the row's lock serialises concurrent requests for the address. The statement
-- has no plan to choose (the conflict is probed on the primary key), whatever the statistics.
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
