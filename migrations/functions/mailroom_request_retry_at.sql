-- For mailroom.request's rate-limited answer: when a request of action p_action (its limits
-- p_per_account, p_per_address and window p_window, NULL: the settings') for account p_account
-- to p_address would next be accepted, as epoch seconds: each full limit (the account's; the address's, as the limits count it) frees a place
-- once its oldest counted request leaves the window; the later of the two when both are full.
-- Called by mailroom.request only, as its owner.
CREATE OR REPLACE FUNCTION mailroom.mailroom_request_retry_at(p_account bigint, p_action text, p_per_account integer, p_per_address integer, p_window integer, p_address text) RETURNS bigint
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
DECLARE
    v_window int;
    v_at     bigint;
    v_retry  bigint;
BEGIN
    SELECT coalesce(p_window, s.limit_window_seconds) INTO v_window
      FROM mailroom_settings s;
    SELECT min(x.created_at) INTO v_at
      FROM (SELECT t.created_at FROM tokens t
             WHERE t.account = p_account AND t.action = p_action AND NOT t.rate_limited
               AND t.created_at > extract(epoch FROM now())::bigint - v_window
             ORDER BY t.created_at DESC LIMIT p_per_account) x
     HAVING count(*) >= p_per_account;
    v_retry := v_at + v_window;
    IF p_per_address IS NOT NULL THEN
        SELECT min(x) INTO v_at
          FROM mailroom_address_requests r,
               LATERAL (SELECT u FROM unnest(r.times) u
                         WHERE u > extract(epoch FROM now())::bigint - v_window
                         ORDER BY u DESC LIMIT p_per_address) y(x)
         WHERE r.address = mailroom_limit_address(p_address) AND r.action = p_action
        HAVING count(*) >= p_per_address;
        v_retry := greatest(v_retry, v_at + v_window);
    END IF;
    RETURN v_retry;
END;
$$;
