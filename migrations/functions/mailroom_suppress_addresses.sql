-- Suppresses p_addresses with p_reason (hard_bounce | complaint) and p_source. Called by
-- mailroom_record_feedback. A manual entry keeps its reason, a complaint is not turned into a
-- bounce; an expired entry comes back in force. Returns how many addresses were written.

CREATE OR REPLACE FUNCTION mailroom.mailroom_suppress_addresses(p_addresses text[], p_reason text, p_source text) RETURNS integer
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
DECLARE
    v_n INT;
BEGIN
    INSERT INTO suppressions AS s (address, reason, source)
    SELECT DISTINCT lower(trim(a)), p_reason, left(p_source, 1000)
      FROM unnest(p_addresses) a
     WHERE trim(a) <> ''
    ON CONFLICT (address) DO UPDATE
       SET last_seen = now(), source = EXCLUDED.source,
           reason = CASE WHEN s.reason IN ('manual', 'complaint') THEN s.reason
                         ELSE EXCLUDED.reason END,
           expires_at = NULL;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END;
$$;
