-- Back before 0045: no event feed and no idempotency key. The functions that stage events
-- (mailroom_ack, mailroom_record_feedback, the deliveries triggers) and mailroom.request and
-- mailroom.grant_application are put back as they were (not left to their source files, which
-- name the new tables and column), so that acknowledgements, feedback and requests keep working
-- until the next `collector migrate up`; the rights roles held on mailroom.request are given
-- on its previous signature again.

CREATE OR REPLACE FUNCTION mailroom.request(p_account bigint, p_action text,
                                            p_address text DEFAULT NULL)
    RETURNS TABLE (decision text, token_id bigint, retry_at timestamptz, reason text)
    LANGUAGE plpgsql
    SECURITY DEFINER
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
DECLARE
    k          actions%ROWTYPE;
    v_window   int;
    v_status   account_status;
    v_email    text;
    v_to       text;
    v_why      text;
    v_id       bigint;
    v_limited  boolean;
    v_reason   text;
    v_at       bigint;
    v_retry    bigint;
BEGIN
    -- The limits count the account's and the address's earlier requests: a snapshot older than
    -- a concurrent request's commit (REPEATABLE READ, SERIALIZABLE) would not see it, and two
    -- requests at once could both pass.
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'mailroom.request runs in READ COMMITTED transactions only (this one is %)',
            current_setting('transaction_isolation')
            USING ERRCODE = 'invalid_transaction_state';
    END IF;
    SELECT * INTO k FROM actions x WHERE x.name = p_action;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'refused', NULL::bigint, NULL::timestamptz,
                            format('unknown action %s', coalesce(quote_literal(left(p_action, 64)), 'NULL'));
        RETURN;
    END IF;
    IF p_address IS NOT NULL AND k.name <> 'email_change' THEN
        RETURN QUERY SELECT 'refused', NULL::bigint, NULL::timestamptz,
                            format('%s goes to the account''s own address: give no address', p_action);
        RETURN;
    END IF;
    SELECT a.status, a.email INTO v_status, v_email FROM accounts a WHERE a.id = p_account;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'refused', NULL::bigint, NULL::timestamptz, 'unknown account'::text;
        RETURN;
    END IF;
    IF v_status <> k.account_status THEN
        RETURN QUERY SELECT 'refused', NULL::bigint, NULL::timestamptz,
                            format('wrong account state: %s', v_status);
        RETURN;
    END IF;
    IF k.name = 'email_change' THEN
        v_why := mailroom_new_address_refusal(p_account, p_address);
        IF v_why IS NOT NULL THEN
            RETURN QUERY SELECT 'refused', NULL::bigint, NULL::timestamptz, v_why;
            RETURN;
        END IF;
        v_to := btrim(p_address);
    END IF;
    SELECT x.why INTO v_why FROM mailroom_suppression(coalesce(v_to, v_email)) x;
    IF FOUND THEN
        RETURN QUERY SELECT 'suppressed', NULL::bigint, NULL::timestamptz, v_why;
        RETURN;
    END IF;

    INSERT INTO tokens (account, action, to_address) VALUES (p_account, k.name, v_to)
        RETURNING id, rate_limited, suppressed_reason INTO v_id, v_limited, v_reason;
    IF NOT v_limited THEN
        RETURN QUERY SELECT 'queued', v_id, NULL::timestamptz, NULL::text;
        RETURN;
    END IF;

    -- When the next request would be accepted: each full limit frees a place once its oldest
    -- counted request leaves the window.
    SELECT coalesce(k.limit_window_seconds, s.limit_window_seconds) INTO v_window
      FROM mailroom_settings s;
    SELECT min(x.created_at) INTO v_at
      FROM (SELECT t.created_at FROM tokens t
             WHERE t.account = p_account AND t.action = k.name AND NOT t.rate_limited
               AND t.created_at > extract(epoch FROM now())::bigint - v_window
             ORDER BY t.created_at DESC LIMIT k.limit_per_account) x
     HAVING count(*) >= k.limit_per_account;
    v_retry := v_at + v_window;
    IF k.limit_per_address IS NOT NULL THEN
        SELECT min(x) INTO v_at
          FROM mailroom_address_requests r,
               LATERAL (SELECT u FROM unnest(r.times) u
                         WHERE u > extract(epoch FROM now())::bigint - v_window
                         ORDER BY u DESC LIMIT k.limit_per_address) y(x)
         WHERE r.address = mailroom_limit_address(coalesce(v_to, v_email)) AND r.action = k.name
        HAVING count(*) >= k.limit_per_address;
        v_retry := greatest(v_retry, v_at + v_window);
    END IF;
    RETURN QUERY SELECT 'rate_limited', v_id, to_timestamp(v_retry), v_reason;
END;
$$;

DO $$
DECLARE
    r text;
BEGIN
    FOR r IN SELECT a.grantee::regrole::text
               FROM pg_proc p CROSS JOIN LATERAL aclexplode(p.proacl) a
              WHERE p.oid = to_regprocedure('mailroom.request(bigint,text,text,text)')
                AND a.privilege_type = 'EXECUTE' AND a.grantee <> 0 AND a.grantee <> p.proowner
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION mailroom.request(bigint, text, text) TO %s', r);
    END LOOP;
END
$$;
DROP FUNCTION IF EXISTS mailroom.request(bigint, text, text, text);
DROP FUNCTION IF EXISTS mailroom.email_events(bigint, integer);
DROP FUNCTION IF EXISTS mailroom.mailroom_publish_events(integer);
DROP FUNCTION IF EXISTS mailroom.mailroom_prune_email_events(integer);

CREATE OR REPLACE FUNCTION mailroom.grant_application(p_role regrole) RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA mailroom TO %s', p_role);
    EXECUTE format('GRANT EXECUTE ON FUNCTION mailroom.request(bigint, text, text),'
                   ' mailroom.consume(text, text), mailroom.consume_code(bigint, text, text) TO %s',
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

CREATE OR REPLACE FUNCTION mailroom.mailroom_record_feedback(p_event_key text, p_provider text, p_event text, p_message_ids text[], p_group text, p_job_id bigint, p_recipients text[], p_bounce_type text, p_detail text, p_soft_limit integer, p_scope_group text DEFAULT '', p_suppress_unmatched boolean DEFAULT false) RETURNS text
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
DECLARE
    v_gid    INT;
    v_tid    BIGINT;
    v_to     TEXT;     -- the matched delivery's recipient, normalised
    v_bg     INT;
    v_scope  INT;      -- p_scope_group's id (NULL: every group, or no such group)
    v_group  TEXT := p_group;
    v_reason TEXT := 'no_delivery';
    v_rcpt   TEXT[];   -- p_recipients, normalised
    v_target TEXT[] := '{}';  -- the addresses a bounce or complaint suppresses
    v_first  BOOLEAN := FALSE;
    v_addr   TEXT;
    v_by     TEXT;     -- the provider that sent the tags' job (deliveries.provider)
    v_soft   TEXT[] := '{}';
    v_wrote  BOOLEAN := FALSE;
BEGIN
    INSERT INTO mailroom.sns_messages (message_id, type) VALUES (p_event_key, p_event)
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RETURN 'duplicate';
    END IF;
    -- What expired since the last call: an index range, usually empty.
    DELETE FROM mailroom.sns_messages WHERE received_at < now() - interval '30 days';

    v_rcpt := ARRAY(SELECT DISTINCT lower(btrim(a)) FROM unnest(p_recipients) a
                     WHERE btrim(a) <> '');
    IF p_scope_group <> '' THEN
        SELECT g.id INTO v_scope FROM mailroom.consumer_groups g WHERE g.name = p_scope_group;
        -- The tags may name the group or not; they may not name another.
        IF p_group <> '' AND p_group <> p_scope_group THEN
            v_group := '';
            v_reason := 'other_group';
        ELSE
            v_group := p_scope_group;
        END IF;
    END IF;

    IF coalesce(array_length(p_message_ids, 1), 0) > 0 THEN
        SELECT d.group_id, d.token_id, lower(btrim(coalesce(t.to_address, a.email::TEXT)))
          INTO v_gid, v_tid, v_to
          FROM mailroom.deliveries d
          JOIN mailroom.tokens t ON t.id = d.token_id
          LEFT JOIN mailroom.accounts a ON a.id = t.account
         WHERE d.provider_message_id = ANY (p_message_ids)
           AND (p_scope_group = '' OR d.group_id = v_scope)
           AND mailroom.mailroom_feedback_reaches(p_provider, d.provider)
           AND lower(btrim(coalesce(t.to_address, a.email::TEXT))) = ANY (v_rcpt)
         LIMIT 1;
        IF v_gid IS NULL THEN
            -- Why not, for the operator's counter: a delivery with the id exists, but for
            -- another address, sent by another provider, or in another group.
            SELECT CASE WHEN bool_or((p_scope_group = '' OR d.group_id IS NOT DISTINCT FROM v_scope)
                                     AND mailroom.mailroom_feedback_reaches(p_provider, d.provider))
                        THEN 'recipient'
                        WHEN bool_or(p_scope_group = '' OR d.group_id IS NOT DISTINCT FROM v_scope)
                        THEN 'provider'
                        ELSE 'other_group' END
              INTO v_addr
              FROM mailroom.deliveries d
             WHERE d.provider_message_id = ANY (p_message_ids)
            HAVING count(*) > 0;
            IF v_addr IS NOT NULL THEN
                v_reason := v_addr;
                v_addr := NULL;
            END IF;
        END IF;
    END IF;
    IF v_gid IS NULL AND v_group <> '' AND p_job_id > 0 THEN
        SELECT g.id INTO v_bg FROM mailroom.consumer_groups g WHERE g.name = v_group;
        SELECT lower(btrim(coalesce(t.to_address, a.email::TEXT))) INTO v_to
          FROM mailroom.tokens t LEFT JOIN mailroom.accounts a ON a.id = t.account
         WHERE t.id = p_job_id;
        IF v_bg IS NOT NULL AND v_to IS NOT NULL AND NOT (v_to = ANY (v_rcpt)) THEN
            IF v_reason = 'no_delivery' THEN v_reason := 'recipient'; END IF;
        ELSIF v_bg IS NOT NULL AND v_to IS NOT NULL THEN
            SELECT d.group_id, d.token_id, d.provider INTO v_gid, v_tid, v_by
              FROM mailroom.deliveries d
             WHERE d.group_id = v_bg AND d.token_id = p_job_id;
            IF v_gid IS NOT NULL AND NOT mailroom.mailroom_feedback_reaches(p_provider, v_by) THEN
                v_gid := NULL;
                v_tid := NULL;
                v_reason := 'provider';
            -- A batch job without a row of its own (still leased, or acknowledged SENT without
            -- a provider message id) gets one, to record the event on.
            ELSIF v_gid IS NULL AND (mailroom.mailroom_batch_unpack(v_bg, p_job_id)
                                  OR mailroom.mailroom_batch_keep_sent(v_bg, p_job_id)) THEN
                v_gid := v_bg;
                v_tid := p_job_id;
            END IF;
        END IF;
    END IF;

    IF v_gid IS NOT NULL THEN
        v_target := ARRAY[v_to];
        -- Each kind of event counts once per delivery (SES may report a delivery twice).
        IF p_event = 'Delivery' THEN
            UPDATE mailroom.deliveries SET delivered_at = now()
             WHERE group_id = v_gid AND token_id = v_tid AND delivered_at IS NULL;
            v_first := FOUND;
            IF v_first THEN
                PERFORM mailroom.mailroom_reputation_add(v_gid, p_provider, 0, 1, 0, 0);
            END IF;
        ELSIF p_event = 'Bounce' AND p_bounce_type = 'Permanent' THEN
            UPDATE mailroom.deliveries SET bounced_at = now(), bounce_type = p_bounce_type
             WHERE group_id = v_gid AND token_id = v_tid AND bounced_at IS NULL;
            v_first := FOUND;
            IF v_first THEN
                PERFORM mailroom.mailroom_reputation_add(v_gid, p_provider, 0, 0, 1, 0);
            END IF;
        ELSIF p_event = 'Bounce' THEN
            UPDATE mailroom.deliveries SET bounce_type = p_bounce_type
             WHERE group_id = v_gid AND token_id = v_tid AND bounced_at IS NULL;
        ELSIF p_event = 'Complaint' THEN
            UPDATE mailroom.deliveries SET complained_at = now()
             WHERE group_id = v_gid AND token_id = v_tid AND complained_at IS NULL;
            v_first := FOUND;
            IF v_first THEN
                PERFORM mailroom.mailroom_reputation_add(v_gid, p_provider, 0, 0, 0, 1);
            END IF;
        ELSIF p_event = 'Reject' THEN
            UPDATE mailroom.deliveries SET rejected_at = now()
             WHERE group_id = v_gid AND token_id = v_tid AND rejected_at IS NULL;
        END IF;
    ELSIF p_suppress_unmatched AND p_scope_group = '' THEN
        v_target := v_rcpt;
    END IF;

    IF p_event = 'Bounce' AND p_bounce_type = 'Permanent' THEN
        v_wrote := mailroom.mailroom_suppress_addresses(
                       v_target, 'hard_bounce',
                       format('%s bounce: Permanent %s', p_provider, p_detail)) > 0;
    ELSIF p_event = 'Bounce' AND p_bounce_type = 'Transient'
          AND coalesce(array_length(v_target, 1), 0) > 0 THEN
        DELETE FROM mailroom.soft_bounces b
         WHERE b.address = ANY (v_target)
           AND b.bounced_at <= now() - interval '7 days';
        INSERT INTO mailroom.soft_bounces (address) SELECT unnest(v_target);
        v_wrote := TRUE;
        FOREACH v_addr IN ARRAY v_target LOOP
            IF (SELECT count(*) FROM mailroom.soft_bounces b
                 WHERE b.address = v_addr
                   AND b.bounced_at > now() - interval '7 days') >= p_soft_limit THEN
                v_soft := v_soft || v_addr;
            END IF;
        END LOOP;
        IF array_length(v_soft, 1) > 0 THEN
            PERFORM mailroom.mailroom_suppress_addresses(
                v_soft, 'hard_bounce',
                format('%s bounce: %s transient bounces within 7 days %s', p_provider, p_soft_limit,
                       p_detail));
        END IF;
    ELSIF p_event = 'Complaint' THEN
        v_wrote := mailroom.mailroom_suppress_addresses(
                       v_target, 'complaint', format('%s complaint %s', p_provider, p_detail)) > 0;
    END IF;

    IF v_gid IS NOT NULL THEN
        RETURN 'recorded';
    END IF;
    RETURN 'unmatched:' || v_reason || CASE WHEN v_wrote THEN ':suppressed' ELSE '' END;
END;
$$;

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
    RETURN NULL;
END;
$$;

CREATE OR REPLACE TRIGGER deliveries_count_update AFTER UPDATE ON mailroom.deliveries REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION mailroom.trg_deliveries_count_update();

DROP TABLE mailroom.email_events_staged;
DROP TABLE mailroom.email_events;
DROP TABLE mailroom.email_event_publisher;
ALTER TABLE mailroom.mailroom_settings DROP COLUMN event_retention_days;
DROP INDEX mailroom.tokens_idempotency_key_idx;
ALTER TABLE mailroom.tokens DROP COLUMN idempotency_key;
