-- Extends every lease p_owner holds in group p_group, per job and in batches, expired or not, to
-- now + p_lease_ms. Called by the collector after a database outage for the subscribers still
-- connected, whose acknowledgements could not be recorded meanwhile. Returns nothing; a lease
-- already ended (acknowledged, released, due again) is not touched.
CREATE OR REPLACE FUNCTION mailroom.mailroom_renew_all(p_group text, p_owner text, p_lease_ms integer) RETURNS void
    LANGUAGE sql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
    UPDATE deliveries d SET due_at = now() + make_interval(secs => p_lease_ms / 1000.0)
      FROM consumer_groups g
     WHERE g.name = p_group AND d.group_id = g.id AND d.owner = p_owner AND d.state = 'leased';
    UPDATE lease_batches b SET due_at = now() + make_interval(secs => p_lease_ms / 1000.0)
      FROM consumer_groups g
     WHERE g.name = p_group AND b.group_id = g.id AND b.owner = p_owner AND b.state = 'leased';
$$;
