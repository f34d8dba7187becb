-- Back before 0042: mailroom_record_feedback without a scope or the unmatched opt-in. Its
-- previous body is put back (not left to the source file), so that feedback keeps being
-- recorded until the next `collector migrate up`: an event for no delivery suppresses its
-- recipients again, and no recipient or group is compared.

DROP FUNCTION IF EXISTS mailroom.mailroom_record_feedback(text, text, text, text[], text, bigint, text[], text, text, integer, text, boolean);

CREATE OR REPLACE FUNCTION mailroom.mailroom_record_feedback(p_event_key text, p_provider text, p_event text, p_message_ids text[], p_group text, p_job_id bigint, p_recipients text[], p_bounce_type text, p_detail text, p_soft_limit integer) RETURNS text
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
DECLARE
    v_gid   INT;
    v_tid   BIGINT;
    v_bg    INT;
    v_first BOOLEAN := FALSE;
    v_addr  TEXT;
    v_soft  TEXT[] := '{}';
BEGIN
    INSERT INTO sns_messages (message_id, type) VALUES (p_event_key, p_event)
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RETURN 'duplicate';
    END IF;
    -- What expired since the last call: an index range, usually empty.
    DELETE FROM sns_messages WHERE received_at < now() - interval '30 days';

    IF coalesce(array_length(p_message_ids, 1), 0) > 0 THEN
        SELECT d.group_id, d.token_id INTO v_gid, v_tid FROM deliveries d
         WHERE d.provider_message_id = ANY (p_message_ids)
         LIMIT 1;
    END IF;
    IF v_gid IS NULL AND p_group <> '' AND p_job_id > 0 THEN
        SELECT d.group_id, d.token_id INTO v_gid, v_tid
          FROM deliveries d JOIN consumer_groups g ON g.id = d.group_id
         WHERE g.name = p_group AND d.token_id = p_job_id;
        -- A batch job without a row of its own (still leased, or acknowledged SENT without a
        -- provider message id) gets one, to record the event on.
        IF v_gid IS NULL THEN
            SELECT g.id INTO v_bg FROM consumer_groups g WHERE g.name = p_group;
            IF v_bg IS NOT NULL AND (mailroom_batch_unpack(v_bg, p_job_id)
                                     OR mailroom_batch_keep_sent(v_bg, p_job_id)) THEN
                v_gid := v_bg;
                v_tid := p_job_id;
            END IF;
        END IF;
    END IF;

    IF v_gid IS NOT NULL THEN
        -- Each kind of event counts once per delivery (SES may report a delivery twice).
        IF p_event = 'Delivery' THEN
            UPDATE deliveries SET delivered_at = now()
             WHERE group_id = v_gid AND token_id = v_tid AND delivered_at IS NULL;
            v_first := FOUND;
            IF v_first THEN PERFORM mailroom_reputation_add(v_gid, p_provider, 0, 1, 0, 0); END IF;
        ELSIF p_event = 'Bounce' AND p_bounce_type = 'Permanent' THEN
            UPDATE deliveries SET bounced_at = now(), bounce_type = p_bounce_type
             WHERE group_id = v_gid AND token_id = v_tid AND bounced_at IS NULL;
            v_first := FOUND;
            IF v_first THEN PERFORM mailroom_reputation_add(v_gid, p_provider, 0, 0, 1, 0); END IF;
        ELSIF p_event = 'Bounce' THEN
            UPDATE deliveries SET bounce_type = p_bounce_type
             WHERE group_id = v_gid AND token_id = v_tid AND bounced_at IS NULL;
        ELSIF p_event = 'Complaint' THEN
            UPDATE deliveries SET complained_at = now()
             WHERE group_id = v_gid AND token_id = v_tid AND complained_at IS NULL;
            v_first := FOUND;
            IF v_first THEN PERFORM mailroom_reputation_add(v_gid, p_provider, 0, 0, 0, 1); END IF;
        ELSIF p_event = 'Reject' THEN
            UPDATE deliveries SET rejected_at = now()
             WHERE group_id = v_gid AND token_id = v_tid AND rejected_at IS NULL;
        END IF;
    END IF;

    IF p_event = 'Bounce' AND p_bounce_type = 'Permanent' THEN
        PERFORM mailroom_suppress_addresses(p_recipients, 'hard_bounce',
                                            format('%s bounce: Permanent %s', p_provider, p_detail));
    ELSIF p_event = 'Bounce' AND p_bounce_type = 'Transient' THEN
        DELETE FROM soft_bounces b
         WHERE b.address IN (SELECT lower(trim(a)) FROM unnest(p_recipients) a)
           AND b.bounced_at <= now() - interval '7 days';
        INSERT INTO soft_bounces (address)
        SELECT DISTINCT lower(trim(a)) FROM unnest(p_recipients) a WHERE trim(a) <> '';
        FOREACH v_addr IN ARRAY p_recipients LOOP
            IF (SELECT count(*) FROM soft_bounces b
                 WHERE b.address = lower(trim(v_addr))
                   AND b.bounced_at > now() - interval '7 days') >= p_soft_limit THEN
                v_soft := v_soft || v_addr;
            END IF;
        END LOOP;
        IF array_length(v_soft, 1) > 0 THEN
            PERFORM mailroom_suppress_addresses(
                v_soft, 'hard_bounce',
                format('%s bounce: %s transient bounces within 7 days %s', p_provider, p_soft_limit,
                       p_detail));
        END IF;
    ELSIF p_event = 'Complaint' THEN
        PERFORM mailroom_suppress_addresses(p_recipients, 'complaint',
                                            format('%s complaint %s', p_provider, p_detail));
    END IF;

    RETURN CASE WHEN v_gid IS NULL THEN 'unmatched' ELSE 'recorded' END;
END;
$$;
