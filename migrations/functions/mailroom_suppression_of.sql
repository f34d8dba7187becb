-- The suppression entry in force (not expired) of p_address (lower-cased and trimmed), or, when
-- p_address is NULL or '', of account p_account's current address; no row when there is none.
-- In mailroom_list_suppressions's columns. Called by the collector's FindEmails.
CREATE OR REPLACE FUNCTION mailroom.mailroom_suppression_of(p_address text, p_account bigint) RETURNS TABLE(address text, reason text, source text, first_seen bigint, last_seen bigint, expires_at bigint)
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
    SELECT (mailroom_suppression_entry(s)).*
      FROM suppressions s
     WHERE s.address = lower(btrim(CASE WHEN coalesce(p_address, '') <> '' THEN p_address
                                        ELSE (SELECT a.email FROM accounts a
                                               WHERE a.id = p_account) END))
       AND (s.expires_at IS NULL OR s.expires_at > now());
$$;
