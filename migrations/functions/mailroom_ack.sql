-- Records outcomes ('sent', 'failed', 'expired', 'retry', 'defer') of jobs leased to p_owner in
-- p_group; returns the ids recorded. Called by the collector's Store::Ack, one call per
-- acknowledgement. Fenced: a job is recorded only when p_owner holds it at the hand-out count
-- given in p_attempts; others are ignored. SENT costs are added to group_usage. A SENT
-- outcome's provider message id and provider (p_message_ids, p_providers: the transport that
-- sent it, '' or NULL when the subscriber does not say) are kept on its row, which feedback
-- matches by. Each SENT, FAILED and EXPIRED outcome stages the application's event
-- (email_events_staged; the call's plain SENTs packed, one row of email_events_staged_sent
-- per provider and cost). One outcome per id (the first of an id given twice counts). In two
-- parts: the jobs of lease batches (mailroom_ack_batched: a plain SENT keeps no row), then the
-- jobs with a deliveries row (mailroom_ack_rows). The outcome arrays are read row by row
-- (unnest), never by subscript. The ledger's events name the subscription by p_owner's first
-- 12 characters (the transaction's setting mailroom.subscriber, read by the deliveries' insert
-- trigger).
CREATE OR REPLACE FUNCTION mailroom.mailroom_ack(p_group text, p_owner text, p_ids bigint[], p_attempts integer[], p_outcomes text[], p_reasons text[], p_retry_ms integer[], p_costs bigint[], p_message_ids text[] DEFAULT NULL::text[], p_providers text[] DEFAULT NULL::text[]) RETURNS SETOF bigint
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    SET enable_seqscan TO 'off'
    SET enable_bitmapscan TO 'off'
    SET jit TO 'off'
    AS $$
DECLARE
    gid    INT;
    v_o    ack_outcome[];
    v_done BIGINT[];
BEGIN
    SELECT id INTO gid FROM consumer_groups WHERE name = p_group;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown consumer group "%"', p_group USING ERRCODE = 'no_data_found';
    END IF;
    IF coalesce(cardinality(p_ids), 0) = 0 THEN
        RETURN;
    END IF;
    PERFORM set_config('mailroom.subscriber', left(p_owner, 12), true);
    -- One outcome per id, as DISTINCT ON would; the sort only when an id repeats.
    IF (SELECT count(DISTINCT u.id) FROM unnest(p_ids) AS u(id)) <> cardinality(p_ids) THEN
        SELECT array_agg(ROW(u.id, u.attempt, u.outcome, u.reason, u.retry_ms, u.cost, u.mid,
                             u.prov)::ack_outcome)
          INTO v_o
          FROM (SELECT DISTINCT ON (u.id) *
                  FROM unnest(p_ids, p_attempts, p_outcomes, p_reasons, p_retry_ms, p_costs,
                              p_message_ids, p_providers)
                           AS u(id, attempt, outcome, reason, retry_ms, cost, mid, prov)
                 ORDER BY u.id) u;
    ELSE
        SELECT array_agg(ROW(u.id, u.attempt, u.outcome, u.reason, u.retry_ms, u.cost, u.mid,
                             u.prov)::ack_outcome)
          INTO v_o
          FROM unnest(p_ids, p_attempts, p_outcomes, p_reasons, p_retry_ms, p_costs,
                      p_message_ids, p_providers)
                   AS u(id, attempt, outcome, reason, retry_ms, cost, mid, prov);
    END IF;

    SELECT array_agg(b.id) INTO v_done FROM mailroom_ack_batched(gid, p_owner, v_o) AS b(id);
    IF v_done IS NOT NULL THEN
        RETURN QUERY SELECT unnest(v_done);
        IF cardinality(v_done) = cardinality(v_o) THEN
            RETURN;
        END IF;
        -- The others go the per-job way.
        SELECT array_agg(o) INTO v_o
          FROM unnest(v_o) AS o
          LEFT JOIN unnest(v_done) AS x(id) ON x.id = o.id
         WHERE x.id IS NULL;
    END IF;
    RETURN QUERY SELECT * FROM mailroom_ack_rows(gid, p_owner, v_o);
END;
$$;
