-- The names of every consumer group, in order. Called by the collector's statistics gauges and
-- its operator calls (the console's list of groups).
CREATE OR REPLACE FUNCTION mailroom.mailroom_group_names() RETURNS TABLE(group_name text)
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
    SELECT g.name FROM consumer_groups g ORDER BY g.name;
$$;
