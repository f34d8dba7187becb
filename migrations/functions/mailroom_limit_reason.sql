-- The suppressed_reason of a token the abuse limits refused: p_count accepted requests of
-- p_action for this p_scope ('account' or 'address') in the last p_window seconds, p_limit
-- allowed.
CREATE OR REPLACE FUNCTION mailroom.mailroom_limit_reason(p_count INT, p_action TEXT,
                                                 p_scope TEXT, p_window INT, p_limit INT)
    RETURNS TEXT
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
    SELECT format('rate limited: %s %s requests for this %s in the last %s s (limit %s)',
                  p_count, p_action, p_scope, p_window, p_limit);
$$;
