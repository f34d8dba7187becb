-- The subscription p_owner of group p_group ended without handing its jobs back. Called by the
-- collector when a stream ends. Its leases (per job and in batches) run out as usual (its sender
-- may still deliver and acknowledge them) but no longer count as lost leases.
CREATE OR REPLACE FUNCTION mailroom.mailroom_holder_left(p_group text, p_owner text) RETURNS void
    LANGUAGE sql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
    UPDATE deliveries d SET holder_left = true
      FROM consumer_groups g
     WHERE g.name = p_group AND d.group_id = g.id AND d.owner = p_owner AND d.state = 'leased';
    UPDATE lease_batches b SET holder_left = true
      FROM consumer_groups g
     WHERE g.name = p_group AND b.group_id = g.id AND b.owner = p_owner AND b.state = 'leased';
$$;
