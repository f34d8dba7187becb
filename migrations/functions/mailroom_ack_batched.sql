-- The first part of mailroom_ack, for group p_group_id: of p_outcomes (one per id), those of
-- jobs in a lease batch leased to p_owner (only a job on its first hand-out can be) with no
-- outcome yet are recorded in the batches' bits (mailroom_batch_match locks the batches), and
-- their ids returned. A plain SENT (no provider message id) keeps no row: it is counted in
-- delivery_counts and its event staged here, packed: the call's plain SENTs stage one row of
-- email_events_staged_sent per provider and cost (one for most calls), with the ledger's
-- columns and the tokens' ids, which the publisher unpacks. Every other outcome keeps its per-job row, written
-- as the per-job path writes it (state, failures, reason, cost, retry time, message id,
-- provider): its row's triggers count it and stage its event. SENT costs go to group_usage.
-- Called by mailroom_ack only: its statements are planned under that function's settings.
CREATE OR REPLACE FUNCTION mailroom.mailroom_ack_batched(p_group_id integer, p_owner text, p_outcomes mailroom.ack_outcome[]) RETURNS SETOF bigint
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
DECLARE
    v_ids   BIGINT[];
    v_first BOOLEAN[];
    v_mb    BIGINT[];
    v_slot  INT[];
    v_kept  BOOLEAN[];
    v_match BIGINT[];
    v_plain BIGINT;
    v_sent  BIGINT;
    v_sum   BIGINT;
BEGIN
    SELECT array_agg(o.id), array_agg(o.attempt = 1) INTO v_ids, v_first FROM unnest(p_outcomes) o;
    WITH m AS MATERIALIZED (
        SELECT m.batch_id, m.slot, m.recovery, u.id, u.outcome, u.reason, u.retry_ms, u.cost,
               u.mid, u.prov, (u.outcome <> 'sent' OR coalesce(u.mid, '') <> '') AS kept
          FROM mailroom_batch_match(p_group_id, p_owner, v_ids, v_first) m
          JOIN unnest(p_outcomes) WITH ORDINALITY
                   AS u(id, attempt, outcome, reason, retry_ms, cost, mid, prov, ord)
            ON u.ord = m.ord
    ), ins AS (
        INSERT INTO deliveries (group_id, token_id, state, attempts, failures, reason,
                                cost_micros, due_at, provider_message_id, provider, recovery,
                                updated_at)
        SELECT p_group_id, m.id,
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
        -- A plain SENT outcome has no row for the deliveries trigger to stage its event from:
        -- staged packed, one row per provider and cost for all of the call's.
        INSERT INTO email_events_staged_sent (group_id, handout, subscriber, provider,
                                              cost_micros, token_ids, emails)
        SELECT p_group_id, 1, left(p_owner, 12), NULLIF(m.prov, ''), m.cost,
               array_agg(m.id ORDER BY m.id), count(*)
          FROM m WHERE m.outcome = 'sent' AND NOT m.kept
         GROUP BY NULLIF(m.prov, ''), m.cost
    )
    SELECT array_agg(m.batch_id), array_agg(m.slot), array_agg(m.kept), array_agg(m.id),
           count(*) FILTER (WHERE m.outcome = 'sent' AND NOT m.kept),
           count(*) FILTER (WHERE m.outcome = 'sent'),
           coalesce(sum(m.cost) FILTER (WHERE m.outcome = 'sent'), 0)
      INTO v_mb, v_slot, v_kept, v_match, v_plain, v_sent, v_sum
      FROM m;
    IF v_mb IS NULL THEN
        RETURN;
    END IF;
    PERFORM mailroom_batch_record(v_mb, v_slot, v_kept);
    IF v_plain > 0 THEN
        INSERT INTO delivery_counts (group_id, state, n) VALUES (p_group_id, 'sent', v_plain);
    END IF;
    IF v_sent > 0 THEN
        INSERT INTO group_usage AS g (group_id, month, sent, cost_micros)
        VALUES (p_group_id, date_trunc('month', now() AT TIME ZONE 'UTC')::DATE, v_sent, v_sum)
        ON CONFLICT (group_id, month) DO UPDATE
           SET sent = g.sent + EXCLUDED.sent, cost_micros = g.cost_micros + EXCLUDED.cost_micros;
    END IF;
    RETURN QUERY SELECT unnest(v_match);
END;
$$;
