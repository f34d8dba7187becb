-- Records one provider's event about a message, once per `p_event_key` (idempotent: a key seen
-- before changes nothing and returns 'duplicate'). Called by the feedback endpoint, one
-- transaction per SNS message or webhook event.
--   p_event_key: the SNS MessageId for SES, '<provider>:<event id>' for the other providers
--   p_provider: ses | postmark | sendgrid | mailgun | resend | sandbox | http (the path it came
--   on; the suppression's source and the reputation counters name it)
--   p_event: Delivery | Bounce | Complaint | Reject
--   p_message_ids: the provider's id of the message in each form the sender may have recorded
--   it (deliveries.provider_message_id); p_group / p_job_id: from the message's tags, used
--   when no delivery carries one of those ids ('' / 0 when absent; a job still leased in a
--   batch, or acknowledged SENT in one without a message id, is found this way)
--   p_recipients: the addresses concerned (bounced, complained, delivered recipients)
--   p_bounce_type: Permanent | Transient | Undetermined (Bounce only); p_detail: a short text
--   for the suppression's source (the bounce subtype, the complaint feedback type)
--   p_scope_group: the only group whose deliveries the event may name (the group of the
--   secret it was signed with); '' for every group
--   p_suppress_unmatched: whether an event that matches no delivery still suppresses its
--   recipients (the operator's opt-in for the provider); never for a scoped event
--
-- An event is attached to a delivery only when the delivery carries one of its message ids (or,
-- failing that, is the tags' job of the tags' group) and the delivery's recipient (the token's
-- to_address, else its account's email, as lower(btrim(address))) is one of p_recipients, and
-- the delivery's group is p_scope_group when that is set, and the path may reach what the
-- delivery's provider sent (mailroom_feedback_reaches: a provider's path only that provider's
-- deliveries, and those sent by SMTP or of no known provider). A matched event records on that
-- delivery, counts once per delivery and kind, and suppresses (or counts a soft bounce of) the
-- delivery's recipient only. An unmatched one changes nothing but the event key, unless
-- p_suppress_unmatched (then its recipients are suppressed as before deliveries were matched).
-- A matched event stages the application's event of the delivery's token
-- (email_events_staged): 'delivered' and 'complained' the first of their kind per delivery,
-- 'bounced' (detail: the bounce type) a Permanent bounce the first time and a Transient or
-- Undetermined one each time until it is bounced; a Reject stages none.
-- Returns 'recorded', 'duplicate', or 'unmatched:<reason>' with reason no_delivery (no
-- delivery with those ids or tags), recipient (one was found, for another address), provider
-- (one was found, sent by another provider) or other_group (one was found, of a group outside
-- p_scope_group), followed by ':suppressed'
-- when p_suppress_unmatched wrote a suppression or a soft bounce.
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
                INSERT INTO mailroom.email_events_staged (token_id, event)
                VALUES (v_tid, 'delivered');
            END IF;
        ELSIF p_event = 'Bounce' AND p_bounce_type = 'Permanent' THEN
            UPDATE mailroom.deliveries SET bounced_at = now(), bounce_type = p_bounce_type
             WHERE group_id = v_gid AND token_id = v_tid AND bounced_at IS NULL;
            v_first := FOUND;
            IF v_first THEN
                PERFORM mailroom.mailroom_reputation_add(v_gid, p_provider, 0, 0, 1, 0);
                INSERT INTO mailroom.email_events_staged (token_id, event, detail)
                VALUES (v_tid, 'bounced', p_bounce_type);
            END IF;
        ELSIF p_event = 'Bounce' THEN
            UPDATE mailroom.deliveries SET bounce_type = p_bounce_type
             WHERE group_id = v_gid AND token_id = v_tid AND bounced_at IS NULL;
            IF FOUND THEN
                INSERT INTO mailroom.email_events_staged (token_id, event, detail)
                VALUES (v_tid, 'bounced', p_bounce_type);
            END IF;
        ELSIF p_event = 'Complaint' THEN
            UPDATE mailroom.deliveries SET complained_at = now()
             WHERE group_id = v_gid AND token_id = v_tid AND complained_at IS NULL;
            v_first := FOUND;
            IF v_first THEN
                PERFORM mailroom.mailroom_reputation_add(v_gid, p_provider, 0, 0, 0, 1);
                INSERT INTO mailroom.email_events_staged (token_id, event, detail)
                VALUES (v_tid, 'complained', NULLIF(p_detail, ''));
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
