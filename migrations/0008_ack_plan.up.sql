-- Acknowledgements and renewals find each delivery by its primary key, with or without planner
-- statistics.
--
-- On a deliveries table that was never ANALYZEd (a fresh or restored database, a burst before
-- autovacuum's analyze) the planner multiplies default selectivities (0.5 % per equality) and
-- believes that "owner = p_owner AND state = 'leased'" or "group_id = gid" matches about one
-- row. mailroom_ack then read *all* the subscriber's leases through deliveries_owner_idx (or
-- the whole group through deliveries_due_idx / deliveries_pkey on group_id alone), sorted them
-- and merge-joined them with the batch, once per acknowledgement: the acknowledged drain of
-- 100,000 jobs fell from ~48,000 to 12,000-29,000 jobs/s with fsync on. mailroom_renew, planned
-- the same way as a nested loop, rescanned the batch for every lease the subscriber held
-- (2 s for 1,000 renewals with 20,000 leases held).
--
-- No planner setting can fix that alone (the wrong plan *is* the cheapest for the estimates), so
-- the shape of the statements changes and the settings make the remaining choice certain:
--  1. The fencing conditions are written so that no index can serve them:
--     `d.owner IS NOT DISTINCT FROM p_owner` and `d.state IS NOT DISTINCT FROM 'leased'` (same
--     meaning here: p_owner is checked NOT NULL, a leased delivery always has an owner). Neither
--     deliveries_owner_idx nor deliveries_due_idx (whose predicate 'leased' no longer implies)
--     can be chosen, so the only index left is deliveries_pkey (group_id, token_id).
--  2. `plan_cache_mode = force_generic_plan`: the batch arrays are parameters, estimated at 10
--     elements, so the batch is the outer side of a nested loop that probes deliveries_pkey per
--     id. A custom plan knows the batch holds 1000-5000 ids and prefers scanning the whole group
--     on deliveries_pkey (group_id = gid) against that; the generic plan never does.
--     (mailroom_renew is a LANGUAGE sql function, whose statements are always planned with
--     parameters, i.e. generically.)
--  3. Sequential scans, bitmap scans, hash joins and merge joins priced out (penalties, not
--     prohibitions), so that a wrong row guess cannot turn the probe into a scan.
--
-- Settings given by CREATE FUNCTION ... SET or ALTER FUNCTION ... SET are reset by a later
-- CREATE OR REPLACE FUNCTION: a migration that redefines mailroom_ack or mailroom_renew must keep
-- the statement shapes of point 1 and repeat, in its CREATE OR REPLACE FUNCTION,
--   mailroom_ack:   SET plan_cache_mode = force_generic_plan SET enable_seqscan = off
--                   SET enable_bitmapscan = off SET enable_hashjoin = off SET enable_mergejoin = off
--   mailroom_renew: SET enable_seqscan = off SET enable_bitmapscan = off
--                   SET enable_hashjoin = off SET enable_mergejoin = off
-- schema_test (AckAndRenewProbeDeliveriesByPrimaryKeyWithoutStatistics) checks the plans the
-- functions really run on an un-ANALYZEd deliveries table with 20,000 leases.

CREATE OR REPLACE FUNCTION mailroom_ack(p_group TEXT, p_owner TEXT, p_ids BIGINT[], p_attempts INT[],
                                        p_outcomes TEXT[], p_reasons TEXT[], p_retry_ms INT[],
                                        p_costs BIGINT[])
    RETURNS SETOF BIGINT
    LANGUAGE plpgsql
    SET plan_cache_mode = force_generic_plan
    SET enable_seqscan = off SET enable_bitmapscan = off
    SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
DECLARE
    gid INT;
BEGIN
    SELECT id INTO gid FROM consumer_groups WHERE name = p_group;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown consumer group "%"', p_group USING ERRCODE = 'no_data_found';
    END IF;
    RETURN QUERY
    WITH u AS (
        SELECT DISTINCT ON (u.id) *
          FROM unnest(p_ids, p_attempts, p_outcomes, p_reasons, p_retry_ms, p_costs)
                   AS u(id, attempt, outcome, reason, retry_ms, cost)
         ORDER BY u.id
    ), upd AS (
        UPDATE deliveries d
           SET state = CASE WHEN u.outcome IN ('retry', 'defer') THEN 'retry'
                            ELSE u.outcome END::delivery_state,
               failures = d.failures + (u.outcome = 'retry')::INT,
               reason = NULLIF(left(u.reason, 1000), ''),
               cost_micros = CASE WHEN u.outcome = 'sent' THEN u.cost END,
               owner = NULL,
               holder_left = false,
               due_at = CASE WHEN u.outcome IN ('retry', 'defer')
                             THEN now() + make_interval(secs => u.retry_ms / 1000.0) END,
               updated_at = now()
          FROM u
         WHERE d.group_id = gid AND d.token_id = u.id AND p_owner IS NOT NULL
           -- Not indexable on purpose: the probe is on deliveries_pkey (see above).
           AND d.state IS NOT DISTINCT FROM 'leased' AND d.owner IS NOT DISTINCT FROM p_owner
           AND d.attempts = u.attempt
        RETURNING d.token_id, u.outcome, u.cost
    ), usage AS (
        INSERT INTO group_usage AS g (group_id, month, sent, cost_micros)
        SELECT gid, date_trunc('month', now() AT TIME ZONE 'UTC')::DATE, count(*),
               coalesce(sum(cost), 0)
          FROM upd WHERE outcome = 'sent'
        HAVING count(*) > 0
        ON CONFLICT (group_id, month) DO UPDATE
           SET sent = g.sent + EXCLUDED.sent, cost_micros = g.cost_micros + EXCLUDED.cost_micros
    )
    SELECT token_id FROM upd;
END;
$$;

CREATE OR REPLACE FUNCTION mailroom_renew(p_group TEXT, p_owner TEXT, p_ids BIGINT[],
                                          p_attempts INT[], p_lease_ms INT)
    RETURNS SETOF BIGINT
    LANGUAGE sql
    SET enable_seqscan = off SET enable_bitmapscan = off
    SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
    UPDATE deliveries d
       SET due_at = now() + make_interval(secs => p_lease_ms / 1000.0), holder_left = false
      FROM consumer_groups g,
           unnest(p_ids, coalesce(p_attempts, array_fill(NULL::INT, ARRAY[cardinality(p_ids)])))
               AS r(id, attempt)
     WHERE g.name = p_group AND d.group_id = g.id AND d.token_id = r.id AND p_owner IS NOT NULL
       -- Not indexable on purpose: the probe is on deliveries_pkey (see above).
       AND d.state IS NOT DISTINCT FROM 'leased' AND d.owner IS NOT DISTINCT FROM p_owner
       AND (r.attempt IS NULL OR d.attempts = r.attempt)
    RETURNING d.token_id;
$$;
