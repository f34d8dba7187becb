-- Back to 0003's mailroom_ack (same signature, no planner settings): the join is left to the
-- planner again.
-- Records outcomes ('sent', 'failed', 'expired', 'retry', 'defer') of jobs leased to p_owner
-- with the given attempts; returns the ids recorded. Anything else (another holder's lease, a
-- lease handed out again since, a finished job) is left unchanged. SENT costs are added to
-- group_usage.
CREATE OR REPLACE FUNCTION mailroom_ack(p_group TEXT, p_owner TEXT, p_ids BIGINT[], p_attempts INT[],
                             p_outcomes TEXT[], p_reasons TEXT[], p_retry_ms INT[],
                             p_costs BIGINT[])
    RETURNS SETOF BIGINT
    LANGUAGE plpgsql AS $$
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
         WHERE d.group_id = gid AND d.token_id = u.id AND d.state = 'leased'
           AND d.owner = p_owner AND d.attempts = u.attempt
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

-- Back to 0017's renewal.
CREATE OR REPLACE FUNCTION mailroom_renew(p_group TEXT, p_owner TEXT, p_ids BIGINT[],
                                         p_attempts INT[], p_lease_ms INT)
    RETURNS SETOF BIGINT
    LANGUAGE plpgsql
    SET enable_seqscan = off SET enable_bitmapscan = off
    AS $$
DECLARE
    gid    INT;
    v_ids  BIGINT[];
    v_att  INT[];
    v_tids TID[];
    v_done BIGINT[];
BEGIN
    SELECT id INTO gid FROM consumer_groups WHERE name = p_group;
    IF NOT FOUND THEN
        RETURN;  -- as 0003's: nothing renewed
    END IF;
    SELECT array_agg(r.id), array_agg(r.attempt) INTO v_ids, v_att
      FROM (SELECT DISTINCT ON (r.id) *
              FROM unnest(p_ids, coalesce(p_attempts,
                                          array_fill(NULL::INT, ARRAY[cardinality(p_ids)])))
                       AS r(id, attempt)
             ORDER BY r.id) r;
    WHILE v_ids IS NOT NULL LOOP
        SELECT array_agg(d.ctid), array_agg(r.id), array_agg(r.attempt)
          INTO v_tids, v_ids, v_att
          FROM unnest(v_ids, v_att) AS r(id, attempt)
         CROSS JOIN LATERAL (SELECT d.ctid, d.state, d.owner, d.attempts FROM deliveries d
                              WHERE d.group_id = gid AND d.token_id = r.id OFFSET 0) d
         WHERE d.state = 'leased' AND d.owner = p_owner
           AND (r.attempt IS NULL OR d.attempts = r.attempt);
        EXIT WHEN v_tids IS NULL;
        WITH upd AS (
            UPDATE deliveries d
               SET due_at = now() + make_interval(secs => p_lease_ms / 1000.0),
                   holder_left = false
              FROM unnest(v_tids, v_ids, v_att) AS r(tid, id, attempt)
             WHERE d.ctid = ANY (v_tids) AND d.ctid = r.tid
               AND coalesce(d.group_id = gid AND d.token_id = r.id AND d.state = 'leased'
                            AND d.owner = p_owner
                            AND (r.attempt IS NULL OR d.attempts = r.attempt), false)
            RETURNING d.token_id
        )
        SELECT array_agg(token_id) INTO v_done FROM upd;
        RETURN QUERY SELECT unnest(v_done);
        EXIT WHEN coalesce(cardinality(v_done), 0) = cardinality(v_ids);
        SELECT array_agg(r.id), array_agg(r.attempt) INTO v_ids, v_att
          FROM unnest(v_ids, v_att) AS r(id, attempt)
          LEFT JOIN unnest(v_done) AS x(id) ON x.id = r.id
         WHERE x.id IS NULL;
    END LOOP;
END;
$$;
