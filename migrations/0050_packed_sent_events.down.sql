-- Back before 0050: the packed plain SENT events go back to email_events_staged, one row per
-- token as the per-row staging wrote them (nothing staged is lost: the table is locked first,
-- so no acknowledgement adds a packed row after they moved), and the table goes. The functions
-- that write or read it are put back as they were (not left to their source files, which use
-- it), so that acknowledgements, the feed and the ledger keep working until the next
-- `collector migrate up`.
LOCK TABLE mailroom.email_events_staged_sent IN ACCESS EXCLUSIVE MODE;
INSERT INTO mailroom.email_events_staged (token_id, event, detail, at, group_id, handout,
                                          subscriber, provider, cost_micros)
SELECT u.token_id, 'sent', p.provider, p.at, p.group_id, p.handout, p.subscriber, p.provider,
       p.cost_micros
  FROM mailroom.email_events_staged_sent p
 CROSS JOIN LATERAL unnest(p.token_ids) AS u(token_id);

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
        INSERT INTO email_events_staged (token_id, event, detail, group_id, handout, subscriber,
                                         provider, cost_micros)
        SELECT m.id, 'sent', NULLIF(m.prov, ''), p_group_id, 1, left(p_owner, 12),
               NULLIF(m.prov, ''), m.cost
          FROM m WHERE m.outcome = 'sent' AND NOT m.kept
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
    v_feed BIGINT;  -- the last event id of the feed's (not 'retried') published
BEGIN
    PERFORM 1 FROM email_event_publisher FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 0::BIGINT, NULL::BIGINT, false;
        RETURN;
    END IF;
    WITH s AS (
        DELETE FROM email_events_staged s
         WHERE s.ctid = ANY (ARRAY(SELECT x.ctid FROM email_events_staged x LIMIT p_limit))
        RETURNING s.*
    ), ins AS (
        INSERT INTO email_events (event_id, token_id, account, action, event, at, detail,
                                  group_id, handout, subscriber, provider, provider_message_id,
                                  cost_micros)
        SELECT nextval('email_events_event_id_seq'), e.token_id, e.account, e.action, e.event,
               e.at, e.detail, e.group_id, e.handout, e.subscriber, e.provider,
               e.provider_message_id, e.cost_micros
          FROM (SELECT s.*, t.account, t.action
                  FROM s JOIN tokens t ON t.id = s.token_id
                 ORDER BY s.at, s.token_id) e
        RETURNING event_id, event
    )
    SELECT (SELECT count(*) FROM s), count(*), max(ins.event_id),
           max(ins.event_id) FILTER (WHERE ins.event <> 'retried')
      INTO v_seen, v_n, v_last, v_feed
      FROM ins;
    -- Only the feed's events wake the application: the ledger's 'retried' are not its.
    IF v_feed IS NOT NULL THEN
        PERFORM pg_notify('mailroom_email_events', v_feed::TEXT);
    END IF;
    RETURN QUERY SELECT v_n, v_last, v_seen = p_limit;
END;
$$;

CREATE OR REPLACE FUNCTION mailroom.email_history(p_account bigint, p_limit integer DEFAULT 1000)
    RETURNS TABLE (event_id bigint, token_id bigint, action text, event text, at timestamptz,
                   handout integer, subscriber text, provider text, provider_message_id text,
                   cost_micros bigint, detail text)
    LANGUAGE sql STABLE
    SECURITY DEFINER
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
    SELECT h.event_id, h.token_id, h.action, h.event, h.at, h.handout, h.subscriber, h.provider,
           h.provider_message_id, h.cost_micros, h.detail
      FROM (SELECT e.event_id, e.token_id, e.action, e.event, e.at, e.handout, e.subscriber,
                   e.provider, e.provider_message_id, e.cost_micros, e.detail
              FROM mailroom.email_events e
             WHERE e.account = p_account
               AND (e.group_id IS NULL OR e.group_id = (SELECT mailroom_delivery_group_id()))
            UNION ALL
            SELECT NULL, s.token_id, t.action, s.event, s.at, s.handout, s.subscriber,
                   s.provider, s.provider_message_id, s.cost_micros, s.detail
              FROM mailroom.email_events_staged s
              JOIN mailroom.tokens t ON t.id = s.token_id
             WHERE t.account = p_account
               AND (s.group_id IS NULL OR s.group_id = (SELECT mailroom_delivery_group_id()))
             ORDER BY event_id DESC NULLS FIRST, at DESC
             LIMIT least(greatest(coalesce(p_limit, 1000), 1), 10000)) h
     ORDER BY h.event_id NULLS LAST, h.at;
$$;

CREATE OR REPLACE FUNCTION mailroom.mailroom_email_ledger(p_group_id integer, p_tokens bigint[])
    RETURNS TABLE (token_id bigint, event_id bigint, event text, at_ms bigint, handout integer,
                   subscriber text, provider text, provider_message_id text, cost_micros bigint,
                   detail text)
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
    SELECT l.token_id, l.event_id, l.event, (extract(epoch FROM l.at) * 1000)::bigint,
           l.handout, l.subscriber, l.provider, l.provider_message_id, l.cost_micros, l.detail
      FROM (SELECT e.token_id, e.event_id, e.event, e.at, e.handout, e.subscriber, e.provider,
                   e.provider_message_id, e.cost_micros, e.detail
              FROM mailroom.email_events e
              JOIN mailroom.tokens t ON t.id = e.token_id
             WHERE t.id = ANY (p_tokens) AND e.account = t.account AND e.group_id = p_group_id
            UNION ALL
            SELECT s.token_id, NULL, s.event, s.at, s.handout, s.subscriber, s.provider,
                   s.provider_message_id, s.cost_micros, s.detail
              FROM mailroom.email_events_staged s
             WHERE s.token_id = ANY (p_tokens) AND s.group_id = p_group_id) l
     ORDER BY l.token_id, l.event_id NULLS LAST, l.at;
$$;

DROP TABLE mailroom.email_events_staged_sent;
