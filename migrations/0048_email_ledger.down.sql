-- Back before 0048: the ledger's columns, its 'retried' events and the application's history
-- go. The functions that write or read the columns are put back as they were (not left to
-- their source files, which use them), so that outcomes, feedback and the feed keep working
-- until the next `collector migrate up`.
DROP FUNCTION IF EXISTS mailroom.email_history(bigint, integer);
DROP FUNCTION IF EXISTS mailroom.mailroom_delivery_group_id();
DROP INDEX IF EXISTS mailroom.email_events_account_idx;
DROP INDEX IF EXISTS mailroom.email_events_trouble_idx;
DELETE FROM mailroom.email_events WHERE event = 'retried';
DELETE FROM mailroom.email_events_staged WHERE event = 'retried';
ALTER TABLE mailroom.email_events DROP CONSTRAINT email_events_event_check;
ALTER TABLE mailroom.email_events ADD CONSTRAINT email_events_event_check
    CHECK (event IN ('sent', 'delivered', 'bounced', 'complained', 'failed', 'suppressed',
                     'expired'));

CREATE OR REPLACE FUNCTION mailroom.trg_deliveries_count_insert() RETURNS trigger
    LANGUAGE plpgsql
    SECURITY DEFINER
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
BEGIN
    INSERT INTO delivery_counts (group_id, state, n)
    SELECT r.group_id, r.state, count(*) FROM new_rows r
     WHERE mailroom_finished_state(r.state)
     GROUP BY r.group_id, r.state;
    INSERT INTO email_events_staged (token_id, event, detail)
    SELECT r.token_id, r.state::TEXT, CASE WHEN r.state = 'sent' THEN r.provider ELSE r.reason END
      FROM new_rows r
     WHERE r.state IN ('failed', 'expired', 'suppressed')
        OR (r.state = 'sent' AND r.provider_message_id IS NOT NULL);
    RETURN NULL;
END;
$$;

CREATE OR REPLACE TRIGGER deliveries_count_insert AFTER INSERT ON mailroom.deliveries REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION mailroom.trg_deliveries_count_insert();

CREATE OR REPLACE FUNCTION mailroom.trg_deliveries_count_update() RETURNS trigger
    LANGUAGE plpgsql
    SECURITY DEFINER
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
BEGIN
    INSERT INTO delivery_counts (group_id, state, n)
    SELECT x.group_id, x.state, sum(x.n) FROM (
        SELECT o.group_id, o.state, -1 AS n FROM old_rows o WHERE mailroom_finished_state(o.state)
        UNION ALL
        SELECT r.group_id, r.state, 1 AS n FROM new_rows r WHERE mailroom_finished_state(r.state)
    ) x
     GROUP BY x.group_id, x.state
    HAVING sum(x.n) <> 0;
    INSERT INTO email_events_staged (token_id, event, detail)
    SELECT r.token_id, r.state::TEXT, CASE WHEN r.state = 'sent' THEN r.provider ELSE r.reason END
      FROM new_rows r JOIN old_rows o ON o.group_id = r.group_id AND o.token_id = r.token_id
     WHERE r.state IN ('sent', 'failed', 'expired', 'suppressed')
       AND o.state IN ('leased', 'retry');
    RETURN NULL;
END;
$$;

CREATE OR REPLACE TRIGGER deliveries_count_update AFTER UPDATE ON mailroom.deliveries REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION mailroom.trg_deliveries_count_update();

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
        -- A plain SENT outcome has no row for the deliveries trigger to stage its event from.
        INSERT INTO email_events_staged (token_id, event, detail)
        SELECT m.id, 'sent', NULLIF(m.prov, '') FROM m WHERE m.outcome = 'sent' AND NOT m.kept
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

CREATE OR REPLACE FUNCTION mailroom.mailroom_feedback_apply(p_gid integer, p_tid bigint, p_provider text, p_event text, p_bounce_type text, p_detail text) RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
BEGIN
    IF p_event = 'Delivery' THEN
        UPDATE mailroom.deliveries SET delivered_at = now()
         WHERE group_id = p_gid AND token_id = p_tid AND delivered_at IS NULL;
        IF FOUND THEN
            PERFORM mailroom.mailroom_reputation_add(p_gid, p_provider, 0, 1, 0, 0);
            INSERT INTO mailroom.email_events_staged (token_id, event) VALUES (p_tid, 'delivered');
        END IF;
    ELSIF p_event = 'Bounce' AND p_bounce_type = 'Permanent' THEN
        UPDATE mailroom.deliveries SET bounced_at = now(), bounce_type = p_bounce_type
         WHERE group_id = p_gid AND token_id = p_tid AND bounced_at IS NULL;
        IF FOUND THEN
            PERFORM mailroom.mailroom_reputation_add(p_gid, p_provider, 0, 0, 1, 0);
            INSERT INTO mailroom.email_events_staged (token_id, event, detail)
            VALUES (p_tid, 'bounced', p_bounce_type);
        END IF;
    ELSIF p_event = 'Bounce' THEN
        UPDATE mailroom.deliveries SET bounce_type = p_bounce_type
         WHERE group_id = p_gid AND token_id = p_tid AND bounced_at IS NULL;
        IF FOUND THEN
            INSERT INTO mailroom.email_events_staged (token_id, event, detail)
            VALUES (p_tid, 'bounced', p_bounce_type);
        END IF;
    ELSIF p_event = 'Complaint' THEN
        UPDATE mailroom.deliveries SET complained_at = now()
         WHERE group_id = p_gid AND token_id = p_tid AND complained_at IS NULL;
        IF FOUND THEN
            PERFORM mailroom.mailroom_reputation_add(p_gid, p_provider, 0, 0, 0, 1);
            INSERT INTO mailroom.email_events_staged (token_id, event, detail)
            VALUES (p_tid, 'complained', NULLIF(p_detail, ''));
        END IF;
    ELSIF p_event = 'Reject' THEN
        UPDATE mailroom.deliveries SET rejected_at = now()
         WHERE group_id = p_gid AND token_id = p_tid AND rejected_at IS NULL;
    END IF;
END;
$$;

CREATE OR REPLACE FUNCTION mailroom.mailroom_publish_events(p_limit integer)
    RETURNS TABLE (published bigint, last_event_id bigint, more boolean)
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    SET jit TO 'off'
    AS $$
DECLARE
    v_seen BIGINT;
    v_n    BIGINT;
    v_last BIGINT;
BEGIN
    PERFORM 1 FROM email_event_publisher FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 0::BIGINT, NULL::BIGINT, false;
        RETURN;
    END IF;
    WITH s AS (
        DELETE FROM email_events_staged s
         WHERE s.ctid = ANY (ARRAY(SELECT x.ctid FROM email_events_staged x LIMIT p_limit))
        RETURNING s.token_id, s.event, s.detail, s.at
    ), ins AS (
        INSERT INTO email_events (event_id, token_id, account, action, event, at, detail)
        SELECT nextval('email_events_event_id_seq'), e.token_id, e.account, e.action, e.event,
               e.at, e.detail
          FROM (SELECT s.token_id, t.account, t.action, s.event, s.at, s.detail
                  FROM s JOIN tokens t ON t.id = s.token_id
                 ORDER BY s.at, s.token_id) e
        RETURNING event_id
    )
    SELECT (SELECT count(*) FROM s), count(*), max(ins.event_id) INTO v_seen, v_n, v_last
      FROM ins;
    IF v_n > 0 THEN
        PERFORM pg_notify('mailroom_email_events', v_last::TEXT);
    END IF;
    RETURN QUERY SELECT v_n, v_last, v_seen = p_limit;
END;
$$;

CREATE OR REPLACE FUNCTION mailroom.email_events(p_after bigint, p_limit integer)
    RETURNS TABLE (event_id bigint, token_id bigint, account bigint, action text, event text,
                   at timestamptz, detail text)
    LANGUAGE sql STABLE
    SECURITY DEFINER
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
    SELECT e.event_id, e.token_id, e.account, e.action, e.event, e.at, e.detail
      FROM mailroom.email_events e
     WHERE e.event_id > coalesce(p_after, 0)
     ORDER BY e.event_id
     LIMIT least(greatest(coalesce(p_limit, 1000), 1), 10000);
$$;

CREATE OR REPLACE FUNCTION mailroom.grant_application(p_role regrole) RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA mailroom TO %s', p_role);
    EXECUTE format('GRANT EXECUTE ON FUNCTION mailroom.request(bigint, text, text, text),'
                   ' mailroom.consume(text, text), mailroom.consume_code(bigint, text, text),'
                   ' mailroom.email_events(bigint, integer) TO %s',
                   p_role);
    EXECUTE format('GRANT SELECT ON mailroom.account_emails, mailroom.action_rules TO %s', p_role);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE (status, email, login, locale)'
                   ' ON mailroom.accounts TO %s', p_role);
    EXECUTE format('GRANT USAGE ON SEQUENCE mailroom.accounts_id_seq TO %s', p_role);
END;
$$;

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

ALTER TABLE mailroom.email_events
    DROP COLUMN group_id, DROP COLUMN handout, DROP COLUMN subscriber, DROP COLUMN provider,
    DROP COLUMN provider_message_id, DROP COLUMN cost_micros;
ALTER TABLE mailroom.email_events_staged
    DROP COLUMN group_id, DROP COLUMN handout, DROP COLUMN subscriber, DROP COLUMN provider,
    DROP COLUMN provider_message_id, DROP COLUMN cost_micros;
