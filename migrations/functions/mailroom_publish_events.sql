-- Publishes up to p_limit staged events (email_events_staged, and the plain SENTs packed in
-- email_events_staged_sent, one 'sent' event per token of a row) into the application's feed
-- (email_events), numbered from email_events_event_id_seq in the order they were staged, and
-- NOTIFYs mailroom_email_events with the last event id of the feed's when it published any
-- (a publish of 'retried' events only notifies nobody). Called by the
-- collector's publisher about once a second, in a transaction of its own (autocommit). Only
-- one publish runs at a time: it holds the row lock of email_event_publisher until its
-- transaction ends (a publish that finds it taken publishes nothing and returns 0), and it is
-- the only caller of the sequence, so every event id is taken after the previous publish
-- committed and a snapshot that sees an event sees every event of a smaller id
-- (docs/design.md, "The event feed"). A staged row another transaction has not committed yet
-- is not seen, and stays for a later publish. Events of tokens already gone are dropped. The
-- ledger's columns (group_id, handout, subscriber, provider, provider_message_id,
-- cost_micros) go along. A packed row is published whole, in the publish that reaches it while
-- under p_limit, and every publish takes at least the first packed row it sees, so the plain
-- SENTs never wait behind a backlog of per-row events: a publish may number up to one row's
-- events more than p_limit. The packed rows are counted by their `emails`, never by reading
-- their arrays, of which only the rows taken are read.
-- Returns the events published, the last event id (NULL: none) and whether to call again.
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
    WITH r AS (
        SELECT ARRAY(SELECT x.ctid FROM email_events_staged x LIMIT p_limit) AS rows
    ), d AS (
        DELETE FROM email_events_staged s WHERE s.ctid = ANY ((SELECT r.rows FROM r)::tid[])
        RETURNING s.*
    ), p AS (
        -- The packed rows that start under p_limit, counting the per-row ones first; the
        -- first packed row whatever the per-row ones took.
        DELETE FROM email_events_staged_sent p
         WHERE p.ctid = ANY (ARRAY(
                   SELECT y.ctid
                     FROM (SELECT x.ctid, sum(x.emails) OVER (ROWS UNBOUNDED PRECEDING)
                                          - x.emails AS before
                             FROM email_events_staged_sent x LIMIT p_limit) y
                    WHERE y.before < greatest(p_limit - (SELECT cardinality(r.rows) FROM r), 1)))
        RETURNING p.*
    ), s AS (
        SELECT d.token_id, d.event, d.detail, d.at, d.group_id, d.handout, d.subscriber,
               d.provider, d.provider_message_id, d.cost_micros
          FROM d
        UNION ALL
        SELECT u.token_id, 'sent', p.provider, p.at, p.group_id, p.handout, p.subscriber,
               p.provider, NULL, p.cost_micros
          FROM p CROSS JOIN LATERAL unnest(p.token_ids) AS u(token_id)
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
    SELECT (SELECT count(*) FROM d) + (SELECT coalesce(sum(p.emails), 0) FROM p),
           count(*), max(ins.event_id),
           max(ins.event_id) FILTER (WHERE ins.event <> 'retried')
      INTO v_seen, v_n, v_last, v_feed
      FROM ins;
    -- Only the feed's events wake the application: the ledger's 'retried' are not its.
    IF v_feed IS NOT NULL THEN
        PERFORM pg_notify('mailroom_email_events', v_feed::TEXT);
    END IF;
    RETURN QUERY SELECT v_n, v_last, v_seen >= p_limit;
END;
$$;
