-- Outcome states counted: everything but 'leased' and 'retry'.

CREATE OR REPLACE FUNCTION mailroom.mailroom_finished_state(s delivery_state) RETURNS boolean
    LANGUAGE sql IMMUTABLE
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
    SELECT s::TEXT NOT IN ('leased', 'retry');
$$;
