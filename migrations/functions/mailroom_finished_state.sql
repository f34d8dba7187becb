-- Outcome states counted: everything but 'leased' and 'retry'.
-- Inlined into its callers, so no SET search_path (a function with settings is never inlined):
-- it is called only from mailroom's functions, whose pinned search path it then runs under,
-- and it names mailroom's tables schema-qualified.
CREATE OR REPLACE FUNCTION mailroom.mailroom_finished_state(s delivery_state) RETURNS boolean
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT s::TEXT NOT IN ('leased', 'retry');
$$;
