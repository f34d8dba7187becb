-- The suppression in force for an email, if any: at most one row (a primary key probe). Called by
-- mailroom_dequeue and request; LANGUAGE sql, STABLE, one SELECT, so the planner inlines it.
-- Inlined into its callers, so no SET search_path (a function with settings is never inlined):
-- it runs only under its pinned callers' search path and names mailroom's tables
-- schema-qualified.
CREATE OR REPLACE FUNCTION mailroom.mailroom_suppression(p_email text) RETURNS TABLE(address text, why text)
    LANGUAGE sql STABLE
    AS $$
    SELECT s.address,
           'address suppressed: ' || s.reason
               || CASE WHEN s.source <> '' THEN ' (' || s.source || ')' ELSE '' END
      FROM mailroom.suppressions s
     WHERE s.address = lower(trim(p_email))
       AND (s.expires_at IS NULL OR s.expires_at > now());
$$;
