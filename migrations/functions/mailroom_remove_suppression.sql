-- Deletes the suppression entry of p_address (lower-cased and trimmed) for an operator and
-- returns it, in mailroom_list_suppressions's columns; no row when there was none. Called by the
-- collector's RemoveSuppression and the console.
CREATE OR REPLACE FUNCTION mailroom.mailroom_remove_suppression(p_address text) RETURNS TABLE(address text, reason text, source text, first_seen bigint, last_seen bigint, expires_at bigint)
    LANGUAGE sql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
    DELETE FROM suppressions s WHERE s.address = lower(trim(p_address))
    RETURNING (mailroom_suppression_entry(s)).*;
$$;
