-- The ids of every consumer group, in order. Called by the retention pass, which expires leases
-- and prunes deliveries group by group.
CREATE OR REPLACE FUNCTION mailroom.mailroom_group_ids() RETURNS TABLE(group_id integer)
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
    SELECT g.id FROM consumer_groups g ORDER BY g.id;
$$;
