-- Inserts or updates the suppression entry of p_address (lower-cased and trimmed) for an
-- operator: reason, source and expiry (p_expires_at Unix seconds, 0 never) are replaced,
-- last_seen set to now, first_seen kept. Returns the entry as stored, in
-- mailroom_list_suppressions's columns. The table's checks refuse an empty address or an
-- unknown reason (check_violation). Called by the collector's AddSuppression.
CREATE OR REPLACE FUNCTION mailroom.mailroom_add_suppression(p_address text, p_reason text, p_source text, p_expires_at bigint) RETURNS TABLE(address text, reason text, source text, first_seen bigint, last_seen bigint, expires_at bigint)
    LANGUAGE sql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
    INSERT INTO suppressions AS s (address, reason, source, expires_at)
    VALUES (lower(trim(p_address)), p_reason, p_source,
            CASE WHEN p_expires_at = 0 THEN NULL ELSE to_timestamp(p_expires_at) END)
    ON CONFLICT (address) DO UPDATE
       SET reason = EXCLUDED.reason, source = EXCLUDED.source, expires_at = EXCLUDED.expires_at,
           last_seen = now()
    RETURNING (mailroom_suppression_entry(s)).*;
$$;
