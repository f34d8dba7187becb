-- Suppresses the recipients of jobs p_ids (reason smtp_rejected, source the matching entry of
-- p_sources): inserts the address, or refreshes an existing entry (last_seen, source; an expired
-- entry comes back in force, a manual or complaint entry keeps its reason). Called by the
-- collector in an acknowledgement's transaction, for recorded outcomes only. Returns how many
-- addresses were written.

CREATE OR REPLACE FUNCTION mailroom.mailroom_suppress_recipients(p_ids bigint[], p_sources text[]) RETURNS integer
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
DECLARE
    v_n INT;
BEGIN
    INSERT INTO suppressions AS s (address, reason, source)
    SELECT DISTINCT ON (lower(trim(a.email::TEXT)))
           lower(trim(a.email::TEXT)), 'smtp_rejected', left(coalesce(u.source, ''), 1000)
      FROM unnest(p_ids, p_sources) AS u(id, source)
      JOIN tokens t ON t.id = u.id
      JOIN accounts a ON a.id = t.account
     WHERE trim(a.email::TEXT) <> ''
     ORDER BY lower(trim(a.email::TEXT)), u.id DESC
    ON CONFLICT (address) DO UPDATE
       SET last_seen = now(), source = EXCLUDED.source,
           reason = CASE WHEN s.reason = 'manual' OR s.reason = 'complaint' THEN s.reason
                         ELSE EXCLUDED.reason END,
           expires_at = NULL;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END;
$$;
