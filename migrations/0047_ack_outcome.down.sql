-- Back before 0047: mailroom_ack is put back as it was (one function, not left to its source
-- file, which calls the parts), then its parts and their type are dropped.
-- Records outcomes ('sent', 'failed', 'expired', 'retry', 'defer') of jobs leased to p_owner in
-- p_group; returns the ids recorded. Called by the collector's Store::Ack, one call per
-- acknowledgement. Fenced: a job is recorded only when p_owner holds it at the hand-out count
-- given in p_attempts; others are ignored. SENT costs are added to group_usage; a lease batch's
-- jobs are recorded in its bits (a plain SENT keeps no row), the others on their deliveries
-- rows. A SENT outcome's provider message id and provider (p_message_ids, p_providers: the
-- transport that sent it, '' or NULL when the subscriber does not say) are kept on its row,
-- which feedback matches by. Each SENT, FAILED and EXPIRED outcome stages the application's
-- event (email_events_staged): the deliveries triggers for those recorded on a row, one INSERT
-- per call here for the plain SENT ones. The outcome arrays are read row by row (unnest WITH
-- ORDINALITY), never by subscript.
CREATE OR REPLACE FUNCTION mailroom.mailroom_ack(p_group text, p_owner text, p_ids bigint[], p_attempts integer[], p_outcomes text[], p_reasons text[], p_retry_ms integer[], p_costs bigint[], p_message_ids text[] DEFAULT NULL::text[], p_providers text[] DEFAULT NULL::text[]) RETURNS SETOF bigint
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    SET enable_seqscan TO 'off'
    SET enable_bitmapscan TO 'off'
    SET jit TO 'off'
    AS $$
DECLARE
    gid     INT;
    v_ids   BIGINT[] := p_ids;
    v_att   INT[] := p_attempts;
    v_first BOOLEAN[];
    v_out   TEXT[] := p_outcomes;
    v_rsn   TEXT[] := p_reasons;
    v_ms    INT[] := p_retry_ms;
    v_cost  BIGINT[] := p_costs;
    v_mid   TEXT[] := p_message_ids;
    v_prov  TEXT[] := p_providers;
    v_mb    BIGINT[];
    v_slot  INT[];
    v_ord   INT[];
    v_kept  BOOLEAN[];
    v_match BIGINT[];
    v_plain BIGINT;
    v_sent  BIGINT;
    v_sum   BIGINT;
    v_tids  TID[];
    v_done  BIGINT[];
BEGIN
    SELECT id INTO gid FROM consumer_groups WHERE name = p_group;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown consumer group "%"', p_group USING ERRCODE = 'no_data_found';
    END IF;
    IF coalesce(cardinality(p_ids), 0) = 0 THEN
        RETURN;
    END IF;
    -- One outcome per id, as DISTINCT ON would; the sort only when an id repeats.
    IF (SELECT count(DISTINCT u.id) FROM unnest(p_ids) AS u(id)) <> cardinality(p_ids) THEN
        SELECT array_agg(u.id), array_agg(u.attempt), array_agg(u.outcome), array_agg(u.reason),
               array_agg(u.retry_ms), array_agg(u.cost), array_agg(u.mid), array_agg(u.prov)
          INTO v_ids, v_att, v_out, v_rsn, v_ms, v_cost, v_mid, v_prov
          FROM (SELECT DISTINCT ON (u.id) *
                  FROM unnest(p_ids, p_attempts, p_outcomes, p_reasons, p_retry_ms, p_costs,
                              p_message_ids, v_prov)
                           AS u(id, attempt, outcome, reason, retry_ms, cost, mid, prov)
                 ORDER BY u.id) u;
    END IF;

    -- 1. Jobs in a lease batch leased to p_owner (only a job on its first hand-out can be; no
    --    outcome yet), the lease batches locked. Every outcome but a plain SENT keeps its per-job
    --    row (bit set, same transaction): the states, failures, reasons, costs and lease ends the
    --    per-job path writes.
    v_first := ARRAY(SELECT x.a = 1 FROM unnest(v_att) WITH ORDINALITY AS x(a, o) ORDER BY x.o);
    WITH m AS MATERIALIZED (
        SELECT m.batch_id, m.slot, m.ord, m.recovery, u.id, u.outcome, u.reason, u.retry_ms,
               u.cost, u.mid, u.prov, (u.outcome <> 'sent' OR coalesce(u.mid, '') <> '') AS kept
          FROM mailroom_batch_match(gid, p_owner, v_ids, v_first) m
          JOIN unnest(v_ids, v_out, v_rsn, v_ms, v_cost, v_mid, v_prov) WITH ORDINALITY
                   AS u(id, outcome, reason, retry_ms, cost, mid, prov, ord) ON u.ord = m.ord
    ), ins AS (
        INSERT INTO deliveries (group_id, token_id, state, attempts, failures, reason,
                                cost_micros, due_at, provider_message_id, provider, recovery,
                                updated_at)
        SELECT gid, m.id,
               CASE WHEN m.outcome IN ('retry', 'defer') THEN 'retry'
                    ELSE m.outcome END::delivery_state,
               1, (m.outcome = 'retry')::INT, NULLIF(left(m.reason, 1000), ''),
               CASE WHEN m.outcome = 'sent' THEN m.cost END,
               CASE WHEN m.outcome IN ('retry', 'defer')
                    THEN now() + make_interval(secs => m.retry_ms / 1000.0) END,
               NULLIF(m.mid, ''),
               CASE WHEN m.outcome = 'sent' THEN NULLIF(m.prov, '') END, m.recovery, now()
          FROM m
         WHERE m.kept
    ), ev AS (
        -- A plain SENT outcome has no row for the deliveries trigger to stage its event from.
        INSERT INTO email_events_staged (token_id, event, detail)
        SELECT m.id, 'sent', NULLIF(m.prov, '') FROM m WHERE m.outcome = 'sent' AND NOT m.kept
    )
    SELECT array_agg(m.batch_id), array_agg(m.slot), array_agg(m.ord), array_agg(m.kept),
           array_agg(m.id),
           count(*) FILTER (WHERE m.outcome = 'sent' AND NOT m.kept),
           count(*) FILTER (WHERE m.outcome = 'sent'),
           coalesce(sum(m.cost) FILTER (WHERE m.outcome = 'sent'), 0)
      INTO v_mb, v_slot, v_ord, v_kept, v_match, v_plain, v_sent, v_sum
      FROM m;
    IF v_mb IS NOT NULL THEN
        PERFORM mailroom_batch_record(v_mb, v_slot, v_kept);
        -- Plain SENT outcomes have no row: counted here (a row's outcome is counted by its
        -- trigger); the costs of all SENT outcomes go to group_usage.
        IF v_plain > 0 THEN
            INSERT INTO delivery_counts (group_id, state, n) VALUES (gid, 'sent', v_plain);
        END IF;
        IF v_sent > 0 THEN
            INSERT INTO group_usage AS g (group_id, month, sent, cost_micros)
            VALUES (gid, date_trunc('month', now() AT TIME ZONE 'UTC')::DATE, v_sent, v_sum)
            ON CONFLICT (group_id, month) DO UPDATE
               SET sent = g.sent + EXCLUDED.sent,
                   cost_micros = g.cost_micros + EXCLUDED.cost_micros;
        END IF;
        RETURN QUERY SELECT unnest(v_match);
        IF cardinality(v_match) = cardinality(v_ids) THEN
            RETURN;
        END IF;
        -- The others go the per-job way below.
        SELECT array_agg(u.id), array_agg(u.attempt), array_agg(u.outcome), array_agg(u.reason),
               array_agg(u.retry_ms), array_agg(u.cost), array_agg(u.mid), array_agg(u.prov)
          INTO v_ids, v_att, v_out, v_rsn, v_ms, v_cost, v_mid, v_prov
          FROM unnest(v_ids, v_att, v_out, v_rsn, v_ms, v_cost, v_mid, v_prov) WITH ORDINALITY
                   AS u(id, attempt, outcome, reason, retry_ms, cost, mid, prov, ord)
          LEFT JOIN unnest(v_ord) AS x(ord) ON x.ord = u.ord
         WHERE x.ord IS NULL;
    END IF;

    -- 2. Jobs with a deliveries row (the per-job path).
    WHILE v_ids IS NOT NULL LOOP
        SELECT array_agg(d.ctid), array_agg(u.id), array_agg(u.attempt), array_agg(u.outcome),
               array_agg(u.reason), array_agg(u.retry_ms), array_agg(u.cost), array_agg(u.mid),
               array_agg(u.prov)
          INTO v_tids, v_ids, v_att, v_out, v_rsn, v_ms, v_cost, v_mid, v_prov
          FROM unnest(v_ids, v_att, v_out, v_rsn, v_ms, v_cost, v_mid, v_prov)
                   AS u(id, attempt, outcome, reason, retry_ms, cost, mid, prov)
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
              FROM unnest(v_tids, v_ids, v_att, v_out, v_rsn, v_ms, v_cost, v_mid, v_prov)
                       AS u(tid, id, attempt, outcome, reason, retry_ms, cost, mid, prov)
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
               array_agg(u.retry_ms), array_agg(u.cost), array_agg(u.mid), array_agg(u.prov)
          INTO v_ids, v_att, v_out, v_rsn, v_ms, v_cost, v_mid, v_prov
          FROM unnest(v_ids, v_att, v_out, v_rsn, v_ms, v_cost, v_mid, v_prov)
                   AS u(id, attempt, outcome, reason, retry_ms, cost, mid, prov)
          LEFT JOIN unnest(v_done) AS x(id) ON x.id = u.id
         WHERE x.id IS NULL;
    END LOOP;
END;
$$;

DROP FUNCTION IF EXISTS mailroom.mailroom_ack_batched(integer, text, mailroom.ack_outcome[]);
DROP FUNCTION IF EXISTS mailroom.mailroom_ack_rows(integer, text, mailroom.ack_outcome[]);
DROP TYPE mailroom.ack_outcome;
