-- Outcome states counted: everything but 'leased' and 'retry'.

CREATE OR REPLACE FUNCTION mailroom_finished_state(s delivery_state) RETURNS boolean
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT s::TEXT NOT IN ('leased', 'retry');
$$;
