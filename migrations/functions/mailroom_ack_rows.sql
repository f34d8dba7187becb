-- The second part of mailroom_ack, for group p_group_id: records each of p_outcomes (one per
-- id) whose job has a deliveries row leased to p_owner at the outcome's hand-out count (the
-- fence), and returns their ids: the state ('retry' for a retry or a defer, due after its
-- delay; a retry counts a failure), the reason, the SENT cost, the provider message id and the
-- provider (a SENT without them keeps those the row had); the lease ends. SENT costs go to
-- group_usage; the rows' triggers count the outcomes and stage their events. Rows are probed,
-- then written by ctid; an id whose row moved between the two is probed again.
-- Called by mailroom_ack only: its statements are planned under that function's settings.
CREATE OR REPLACE FUNCTION mailroom.mailroom_ack_rows(p_group_id integer, p_owner text, p_outcomes mailroom.ack_outcome[]) RETURNS SETOF bigint
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
DECLARE
    v_o    ack_outcome[] := p_outcomes;
    v_tids TID[];
    v_done BIGINT[];
BEGIN
    WHILE v_o IS NOT NULL LOOP
        SELECT array_agg(d.ctid), array_agg(u) INTO v_tids, v_o
          FROM unnest(v_o) AS u
         CROSS JOIN LATERAL (SELECT d.ctid, d.state, d.owner, d.attempts FROM deliveries d
                              WHERE d.group_id = p_group_id AND d.token_id = u.id OFFSET 0) d
         WHERE d.state = 'leased' AND d.owner = p_owner AND d.attempts = u.attempt;
        EXIT WHEN v_tids IS NULL;
        WITH upd AS (
            UPDATE deliveries d
               SET state = CASE WHEN u.outcome IN ('retry', 'defer') THEN 'retry'
                                ELSE u.outcome END::delivery_state,
                   failures = d.failures + (u.outcome = 'retry')::INT,
                   reason = NULLIF(left(u.reason, 1000), ''),
                   cost_micros = CASE WHEN u.outcome = 'sent' THEN u.cost END,
                   provider_message_id = CASE WHEN u.outcome = 'sent'
                                              THEN coalesce(NULLIF(u.mid, ''),
                                                            d.provider_message_id)
                                              ELSE d.provider_message_id END,
                   provider = CASE WHEN u.outcome = 'sent'
                                   THEN coalesce(NULLIF(u.prov, ''), d.provider)
                                   ELSE d.provider END,
                   owner = NULL,
                   holder_left = false,
                   due_at = CASE WHEN u.outcome IN ('retry', 'defer')
                                 THEN now() + make_interval(secs => u.retry_ms / 1000.0) END,
                   updated_at = now()
              -- (unnest expands each outcome into its columns)
              FROM unnest(v_tids, v_o)
                       AS u(tid, id, attempt, outcome, reason, retry_ms, cost, mid, prov)
             WHERE d.ctid = u.tid
               AND coalesce(d.group_id = p_group_id AND d.token_id = u.id AND d.state = 'leased'
                            AND d.owner = p_owner AND d.attempts = u.attempt, false)
            RETURNING d.token_id, u.outcome, u.cost
        ), usage AS (
            INSERT INTO group_usage AS g (group_id, month, sent, cost_micros)
            SELECT p_group_id, date_trunc('month', now() AT TIME ZONE 'UTC')::DATE, count(*),
                   coalesce(sum(cost), 0)
              FROM upd WHERE outcome = 'sent'
            HAVING count(*) > 0
            ON CONFLICT (group_id, month) DO UPDATE
               SET sent = g.sent + EXCLUDED.sent,
                   cost_micros = g.cost_micros + EXCLUDED.cost_micros
        )
        SELECT array_agg(token_id) INTO v_done FROM upd;
        RETURN QUERY SELECT unnest(v_done);
        EXIT WHEN coalesce(cardinality(v_done), 0) = cardinality(v_o);
        -- The ids not written: their rows moved since the probe; probe them again.
        SELECT array_agg(o) INTO v_o
          FROM unnest(v_o) AS o
          LEFT JOIN unnest(v_done) AS x(id) ON x.id = o.id
         WHERE x.id IS NULL;
    END LOOP;
END;
$$;
