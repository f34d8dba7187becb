-- Back to 0003's mailroom_renew (same signature, no planner settings): the join is left to the
-- planner again.
-- Extends the leases p_owner holds on p_ids (with the given attempts; NULL attempts: any) to
-- now + p_lease_ms; returns the ids renewed. The holder is alive: its leases count again for
-- poison detection.
CREATE OR REPLACE FUNCTION mailroom_renew(p_group TEXT, p_owner TEXT, p_ids BIGINT[], p_attempts INT[],
                               p_lease_ms INT)
    RETURNS SETOF BIGINT
    LANGUAGE sql AS $$
    UPDATE deliveries d
       SET due_at = now() + make_interval(secs => p_lease_ms / 1000.0), holder_left = false
      FROM consumer_groups g,
           unnest(p_ids, coalesce(p_attempts, array_fill(NULL::INT, ARRAY[cardinality(p_ids)])))
               AS r(id, attempt)
     WHERE g.name = p_group AND d.group_id = g.id AND d.token_id = r.id
       AND d.state = 'leased' AND d.owner = p_owner
       AND (r.attempt IS NULL OR d.attempts = r.attempt)
    RETURNING d.token_id;
$$;

