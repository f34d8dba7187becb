-- A suppression list row as the operator's calls show it: address, reason, source, first and last
-- seen (Unix seconds) and expiry (Unix seconds, 0 for never). Called by
-- mailroom_list_suppressions, mailroom_suppression_of, mailroom_add_suppression and
-- mailroom_remove_suppression, so the four answer in the same columns.
CREATE OR REPLACE FUNCTION mailroom.mailroom_suppression_entry(s mailroom.suppressions, OUT address text, OUT reason text, OUT source text, OUT first_seen bigint, OUT last_seen bigint, OUT expires_at bigint) RETURNS record
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
    SELECT s.address, s.reason, s.source, EXTRACT(EPOCH FROM s.first_seen)::BIGINT,
           EXTRACT(EPOCH FROM s.last_seen)::BIGINT,
           coalesce(EXTRACT(EPOCH FROM s.expires_at)::BIGINT, 0);
$$;
