-- Acknowledgements do not depend on planner statistics either (issue 13 §1).
--
-- 0017 left mailroom_ack to the planner: its exposure was thought to end at autovacuum's first
-- ANALYZE of deliveries. collector_bench measured it on 1,000,000 queued tokens without
-- statistics (autovacuum off for the tables, as on a restored database or before the first
-- ANALYZE): 2,781 jobs/s with fsync on and 3,036 with fsync off, against 55,618 / 62,129 after
-- ANALYZE and ~70,000 for 100,000 without statistics; single acknowledgements of 5000 ran for
-- seconds. The cached plan merge-joins (or nested-loops) the batch with all of the subscriber's
-- leases read through deliveries_owner_idx, so the cost grows with the leases held times the
-- table, as 0017's header describes for the renewal.
--
-- The acknowledgement now works in 0017's two steps:
-- 1. one primary-key probe per distinct id (LATERAL, fenced by OFFSET 0) reads the row's ctid,
--    state, owner and attempt, and the fencing (this holder's lease, this attempt) is checked
--    on what it read;
-- 2. the rows kept are updated by ctid, joined to the batch on ctid, with key and fencing
--    checked again inside coalesce(...) (filters only, see 0017).
-- The write joins the batch to deliveries on ctid only: a parameterized TID scan fetches one row
-- per id. 0017's renewal also had `d.ctid = ANY (v_tids)` there, which the nested loop
-- evaluates as a filter on every row fetched, i.e. batch x batch ctid comparisons (a million
-- per call of 1000); the renewal below is 0017's without it.
-- A row updated by another transaction between the two steps (a renewal, a dequeue taking an
-- expired lease over) is skipped by the update and probed again, until every id was recorded
-- or failed its fencing on the row's newest version. The SENT costs of each round go to
-- group_usage as before. Same signature, fencing, outcomes and result as 0003's (the ids
-- recorded, each once).

CREATE OR REPLACE FUNCTION mailroom_ack(p_group TEXT, p_owner TEXT, p_ids BIGINT[],
                                        p_attempts INT[], p_outcomes TEXT[], p_reasons TEXT[],
                                        p_retry_ms INT[], p_costs BIGINT[])
    RETURNS SETOF BIGINT
    LANGUAGE plpgsql
    SET enable_seqscan = off SET enable_bitmapscan = off
    AS $$
DECLARE
    gid    INT;
    v_ids  BIGINT[];
    v_att  INT[];
    v_out  TEXT[];
    v_rsn  TEXT[];
    v_ms   INT[];
    v_cost BIGINT[];
    v_tids TID[];
    v_done BIGINT[];
BEGIN
    SELECT id INTO gid FROM consumer_groups WHERE name = p_group;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown consumer group "%"', p_group USING ERRCODE = 'no_data_found';
    END IF;
    -- One outcome per id, as 0003's DISTINCT ON.
    SELECT array_agg(u.id), array_agg(u.attempt), array_agg(u.outcome), array_agg(u.reason),
           array_agg(u.retry_ms), array_agg(u.cost)
      INTO v_ids, v_att, v_out, v_rsn, v_ms, v_cost
      FROM (SELECT DISTINCT ON (u.id) *
              FROM unnest(p_ids, p_attempts, p_outcomes, p_reasons, p_retry_ms, p_costs)
                       AS u(id, attempt, outcome, reason, retry_ms, cost)
             ORDER BY u.id) u;
    WHILE v_ids IS NOT NULL LOOP
        SELECT array_agg(d.ctid), array_agg(u.id), array_agg(u.attempt), array_agg(u.outcome),
               array_agg(u.reason), array_agg(u.retry_ms), array_agg(u.cost)
          INTO v_tids, v_ids, v_att, v_out, v_rsn, v_ms, v_cost
          FROM unnest(v_ids, v_att, v_out, v_rsn, v_ms, v_cost)
                   AS u(id, attempt, outcome, reason, retry_ms, cost)
         CROSS JOIN LATERAL (SELECT d.ctid, d.state, d.owner, d.attempts FROM deliveries d
                              WHERE d.group_id = gid AND d.token_id = u.id OFFSET 0) d
         WHERE d.state = 'leased' AND d.owner = p_owner AND d.attempts = u.attempt;
        EXIT WHEN v_tids IS NULL;
        WITH upd AS (
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
              FROM unnest(v_tids, v_ids, v_att, v_out, v_rsn, v_ms, v_cost)
                       AS u(tid, id, attempt, outcome, reason, retry_ms, cost)
             WHERE d.ctid = u.tid
               AND coalesce(d.group_id = gid AND d.token_id = u.id AND d.state = 'leased'
                            AND d.owner = p_owner AND d.attempts = u.attempt, false)
            RETURNING d.token_id, u.outcome, u.cost
        ), usage AS (
            INSERT INTO group_usage AS g (group_id, month, sent, cost_micros)
            SELECT gid, date_trunc('month', now() AT TIME ZONE 'UTC')::DATE, count(*),
                   coalesce(sum(cost), 0)
              FROM upd WHERE outcome = 'sent'
            HAVING count(*) > 0
            ON CONFLICT (group_id, month) DO UPDATE
               SET sent = g.sent + EXCLUDED.sent,
                   cost_micros = g.cost_micros + EXCLUDED.cost_micros
        )
        SELECT array_agg(token_id) INTO v_done FROM upd;
        RETURN QUERY SELECT unnest(v_done);
        EXIT WHEN coalesce(cardinality(v_done), 0) = cardinality(v_ids);
        -- The ids not written: their rows moved since the probe; probe them again.
        SELECT array_agg(u.id), array_agg(u.attempt), array_agg(u.outcome), array_agg(u.reason),
               array_agg(u.retry_ms), array_agg(u.cost)
          INTO v_ids, v_att, v_out, v_rsn, v_ms, v_cost
          FROM unnest(v_ids, v_att, v_out, v_rsn, v_ms, v_cost)
                   AS u(id, attempt, outcome, reason, retry_ms, cost)
          LEFT JOIN unnest(v_done) AS x(id) ON x.id = u.id
         WHERE x.id IS NULL;
    END LOOP;
END;
$$;

-- 0017's renewal, its write joined on ctid only (see above).
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
             WHERE d.ctid = r.tid
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
