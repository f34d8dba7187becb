-- The abuse limit per address, for requests of p_action at distinct addresses: counts the request
-- for p_addresses[i] made at p_ats[i] in that address's mailroom_address_requests row unless
-- p_limit accepted requests already fall in the last p_window seconds before p_ats[i] (the window
-- ends at the request's time). Returns an array beside p_addresses: NULL where the request is
-- accepted (counted), else the rate-limited reason. One INSERT ... ON CONFLICT DO UPDATE for the whole
-- set: a new address inserts its row, a known one appends the time only while fewer than the
-- limit fall in the window (the WHERE of the DO UPDATE); the row's lock serialises concurrent
-- requests for one address. A statement cannot update a row twice, so the addresses must be
-- distinct: a caller with several requests for one address makes a call per request, in their
-- order. Rows are inserted in the arrays' order (callers sort by address, so two callers meet
-- rows in one order). No plan to choose, whatever the statistics or the caller's planner
-- settings: the conflict is probed on the primary key, and the accepted addresses are looked up
-- in a jsonb object built from the RETURNING rows (no join). One request (the limits trigger's
-- call, in the application's transaction) takes the same upsert's single-row form: the set
-- form's plumbing (the jsonb object, the ordinality, the aggregate) cost a recovery about 25 us
-- more. PL/pgSQL, not SQL, for its plan cache: a SQL function's statement is planned again in
-- every transaction that calls it.
CREATE OR REPLACE FUNCTION mailroom.mailroom_address_limit(p_addresses TEXT[], p_ats BIGINT[],
                                                  p_action TEXT, p_limit INT,
                                                  p_window INT)
    RETURNS TEXT[]
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
DECLARE
    v_reasons TEXT[];
    v_counted BOOLEAN;
BEGIN
    IF cardinality(p_addresses) = 1 THEN
        IF p_limit > 0 THEN
            INSERT INTO mailroom_address_requests AS r (address, action, times)
            VALUES (p_addresses[1], p_action, ARRAY[p_ats[1]])
            ON CONFLICT (address, action) DO UPDATE
               SET times = ARRAY(SELECT x FROM unnest(r.times) x
                                  ORDER BY x DESC LIMIT p_limit - 1) || EXCLUDED.times
             WHERE (SELECT count(*) FROM unnest(r.times) x WHERE x > EXCLUDED.times[1] - p_window)
                   < p_limit
            RETURNING true INTO v_counted;
        END IF;
        RETURN ARRAY[CASE WHEN v_counted IS NULL
                          THEN mailroom_limit_reason(p_limit, p_action, 'address', p_window,
                                                     p_limit) END];
    END IF;
    WITH counted AS (
        INSERT INTO mailroom_address_requests AS r (address, action, times)
        SELECT u.address, p_action, ARRAY[u.at]
          FROM unnest(p_addresses, p_ats) AS u(address, at)
         WHERE p_limit > 0
        ON CONFLICT (address, action) DO UPDATE
           SET times = ARRAY(SELECT x FROM unnest(r.times) x
                              ORDER BY x DESC LIMIT p_limit - 1) || EXCLUDED.times
         WHERE (SELECT count(*) FROM unnest(r.times) x WHERE x > EXCLUDED.times[1] - p_window)
               < p_limit
        RETURNING r.address
    ), accepted AS (
        SELECT coalesce(jsonb_object_agg(c.address, true), '{}') AS addresses FROM counted c
    )
    SELECT array_agg(CASE WHEN NOT a.addresses ? u.address
                          THEN mailroom_limit_reason(p_limit, p_action, 'address', p_window,
                                                     p_limit) END
                     ORDER BY u.i)
      INTO v_reasons
      FROM accepted a CROSS JOIN unnest(p_addresses) WITH ORDINALITY AS u(address, i);
    RETURN v_reasons;
END;
$$;
