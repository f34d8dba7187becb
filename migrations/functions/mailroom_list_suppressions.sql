-- Entries of the suppression list for an operator: addresses after p_after (exclusive; '' from
-- the start), of reason p_reason ('' any) and starting with p_prefix ('' any), ordered by
-- address, at most p_limit. A range scan of the primary key from the page token; the prefix is a
-- range too (address >= p_prefix), checked with starts_with (no LIKE escaping of the prefix).
-- Times in Unix seconds; expires_at 0 for an entry that never expires. Called by the
-- collector's ListSuppressions and the console.
CREATE OR REPLACE FUNCTION mailroom.mailroom_list_suppressions(p_after text, p_reason text, p_prefix text, p_limit integer) RETURNS TABLE(address text, reason text, source text, first_seen bigint, last_seen bigint, expires_at bigint)
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
    SELECT (mailroom_suppression_entry(s)).*
      FROM suppressions s
     WHERE s.address > p_after AND s.address >= p_prefix
       AND (p_reason = '' OR s.reason = p_reason) AND starts_with(s.address, p_prefix)
     ORDER BY s.address
     LIMIT p_limit;
$$;
