-- Every consumer group, its id and name, ordered by name. Called by the collector: its
-- statistics gauges and the acknowledgement's suppression scope (the names), the operator's
-- list of groups (the console), and the retention pass, which expires leases and prunes
-- deliveries group by group (the ids).
CREATE OR REPLACE FUNCTION mailroom.mailroom_groups() RETURNS TABLE(group_id integer, group_name text)
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
    SELECT g.id, g.name FROM consumer_groups g ORDER BY g.name;
$$;
