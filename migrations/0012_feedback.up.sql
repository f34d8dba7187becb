-- SES feedback through SNS and the reputation counters (issue 12 §2 and §3).
--
-- The sender reports the SES MessageId of every message it sent (JobOutcome.provider_message_id);
-- mailroom_record_sent stores it on the delivery, in the acknowledgement's transaction, after
-- mailroom_ack and only for the SENT outcomes mailroom_ack recorded (mailroom_ack itself is
-- left untouched). SES events (Delivery, Bounce, Complaint, Reject) arrive later through SNS at
-- the collector's feedback endpoint, which verifies them and calls mailroom_record_feedback:
-- idempotent on the SNS MessageId (sns_messages), mapped to the delivery by the SES message id
-- (or, failing that, by the job id and group from the message's tags).
--
-- Reputation: per group and UTC hour, how many emails were sent, delivered, bounced (hard)
-- and complained about (reputation_hourly). A rolling window of N hours reads N rows per
-- group (mailroom_reputation), never the deliveries themselves.

ALTER TABLE deliveries
    ADD COLUMN provider_message_id TEXT,
    ADD COLUMN delivered_at        TIMESTAMPTZ,
    ADD COLUMN bounced_at          TIMESTAMPTZ,
    ADD COLUMN bounce_type         TEXT,
    ADD COLUMN complained_at       TIMESTAMPTZ,
    ADD COLUMN rejected_at         TIMESTAMPTZ;
CREATE INDEX deliveries_provider_message_idx ON deliveries (provider_message_id)
    WHERE provider_message_id IS NOT NULL;

-- SNS messages already processed (idempotency: SNS delivers at least once).
-- Kept 30 days (SNS gives up redelivering long before), pruned by mailroom_record_feedback.
CREATE TABLE sns_messages (
    message_id  TEXT PRIMARY KEY,
    type        TEXT NOT NULL,
    received_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX sns_messages_received_idx ON sns_messages (received_at);

-- Transient (soft) bounces per address, to suppress an address that keeps bouncing; rows
-- older than 7 days are deleted when the address bounces again.
CREATE TABLE soft_bounces (
    address    TEXT NOT NULL,
    bounced_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX soft_bounces_idx ON soft_bounces (address, bounced_at);

-- Insert-only deltas: every acknowledgement and feedback event adds its own row for the current
-- hour, so concurrent acknowledgements of one group (several collectors, several streams) never
-- wait for each other on a shared counter row until commit. The collector's retention pass
-- folds them into one row per group and hour and drops hours older than the longest window
-- (mailroom_compact_reputation, migration 0013), so a window of N hours reads about N rows.
CREATE TABLE reputation_hourly (
    group_id   INT NOT NULL REFERENCES consumer_groups (id) ON DELETE CASCADE,
    hour       TIMESTAMPTZ NOT NULL,
    sent       BIGINT NOT NULL DEFAULT 0,
    delivered  BIGINT NOT NULL DEFAULT 0,
    bounced    BIGINT NOT NULL DEFAULT 0,
    complained BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX reputation_hourly_idx ON reputation_hourly (group_id, hour);

-- Adds to the current hour's counters of a group (one new delta row).
CREATE FUNCTION mailroom_reputation_add(p_group_id INT, p_sent BIGINT, p_delivered BIGINT,
                                        p_bounced BIGINT, p_complained BIGINT)
    RETURNS VOID
    LANGUAGE sql AS $$
    INSERT INTO reputation_hourly (group_id, hour, sent, delivered, bounced, complained)
    VALUES (p_group_id, date_trunc('hour', now()), p_sent, p_delivered, p_bounced, p_complained);
$$;

-- Called after mailroom_ack, in its transaction, for the SENT outcomes it recorded: counts
-- `p_sent` emails sent and stores the provider message ids of jobs `p_ids` (only those that
-- have one: SMTP and file deliveries cost no second write of their rows). Returns how many
-- deliveries got their message id.
CREATE FUNCTION mailroom_record_sent(p_group TEXT, p_sent BIGINT, p_ids BIGINT[],
                                     p_message_ids TEXT[])
    RETURNS INT
    LANGUAGE plpgsql AS $$
DECLARE
    v_gid INT;
    v_n   INT := 0;
BEGIN
    SELECT id INTO v_gid FROM consumer_groups WHERE name = p_group;
    IF NOT FOUND OR p_sent <= 0 THEN
        RETURN 0;
    END IF;
    IF coalesce(array_length(p_ids, 1), 0) > 0 THEN
        UPDATE deliveries d SET provider_message_id = u.mid
          FROM unnest(p_ids, p_message_ids) AS u(id, mid)
         WHERE d.group_id = v_gid AND d.token_id = u.id AND d.state = 'sent' AND u.mid <> '';
        GET DIAGNOSTICS v_n = ROW_COUNT;
    END IF;
    PERFORM mailroom_reputation_add(v_gid, p_sent, 0, 0, 0);
    RETURN v_n;
END;
$$;

-- Suppresses `p_addresses` with `p_reason` (hard_bounce | complaint) and `p_source`. A manual
-- entry keeps its reason, a complaint is not turned into a bounce; an expired entry comes back
-- in force.
CREATE FUNCTION mailroom_suppress_addresses(p_addresses TEXT[], p_reason TEXT, p_source TEXT)
    RETURNS INT
    LANGUAGE plpgsql AS $$
DECLARE
    v_n INT;
BEGIN
    INSERT INTO suppressions AS s (address, reason, source)
    SELECT DISTINCT lower(trim(a)), p_reason, left(p_source, 1000)
      FROM unnest(p_addresses) a
     WHERE trim(a) <> ''
    ON CONFLICT (address) DO UPDATE
       SET last_seen = now(), source = EXCLUDED.source,
           reason = CASE WHEN s.reason IN ('manual', 'complaint') THEN s.reason
                         ELSE EXCLUDED.reason END,
           expires_at = NULL;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END;
$$;

-- Records one SES event delivered by SNS message `p_sns_id` (idempotent: a message seen
-- before changes nothing and returns 'duplicate').
--   p_event: Delivery | Bounce | Complaint | Reject
--   p_ses_message_id: the SES mail.messageId; p_group / p_job_id: from the mail's tags, used
--   when no delivery carries that message id ('' / 0 when absent)
--   p_recipients: the addresses concerned (bounced or complained recipients)
--   p_bounce_type: Permanent | Transient | Undetermined (Bounce only); p_detail: a short text
--   for the suppression's source (the bounce subtype, the complaint feedback type)
--   p_soft_limit: transient bounces of an address within 7 days that suppress it
-- Returns 'duplicate', 'recorded' (a delivery was found) or 'unmatched' (suppressions still
-- applied, no delivery or reputation counter changed).
CREATE FUNCTION mailroom_record_feedback(p_sns_id TEXT, p_event TEXT, p_ses_message_id TEXT,
                                         p_group TEXT, p_job_id BIGINT, p_recipients TEXT[],
                                         p_bounce_type TEXT, p_detail TEXT, p_soft_limit INT)
    RETURNS TEXT
    LANGUAGE plpgsql AS $$
DECLARE
    v_gid   INT;
    v_tid   BIGINT;
    v_first BOOLEAN := FALSE;
    v_addr  TEXT;
    v_soft  TEXT[] := '{}';
BEGIN
    INSERT INTO sns_messages (message_id, type) VALUES (p_sns_id, p_event)
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RETURN 'duplicate';
    END IF;
    -- What expired since the last call: an index range, usually empty.
    DELETE FROM sns_messages WHERE received_at < now() - interval '30 days';

    IF p_ses_message_id <> '' THEN
        SELECT d.group_id, d.token_id INTO v_gid, v_tid FROM deliveries d
         WHERE d.provider_message_id = p_ses_message_id
         LIMIT 1;
    END IF;
    IF v_gid IS NULL AND p_group <> '' AND p_job_id > 0 THEN
        SELECT d.group_id, d.token_id INTO v_gid, v_tid
          FROM deliveries d JOIN consumer_groups g ON g.id = d.group_id
         WHERE g.name = p_group AND d.token_id = p_job_id;
    END IF;

    IF v_gid IS NOT NULL THEN
        -- Each kind of event counts once per delivery (SES may report a delivery twice).
        IF p_event = 'Delivery' THEN
            UPDATE deliveries SET delivered_at = now()
             WHERE group_id = v_gid AND token_id = v_tid AND delivered_at IS NULL;
            v_first := FOUND;
            IF v_first THEN PERFORM mailroom_reputation_add(v_gid, 0, 1, 0, 0); END IF;
        ELSIF p_event = 'Bounce' AND p_bounce_type = 'Permanent' THEN
            UPDATE deliveries SET bounced_at = now(), bounce_type = p_bounce_type
             WHERE group_id = v_gid AND token_id = v_tid AND bounced_at IS NULL;
            v_first := FOUND;
            IF v_first THEN PERFORM mailroom_reputation_add(v_gid, 0, 0, 1, 0); END IF;
        ELSIF p_event = 'Bounce' THEN
            UPDATE deliveries SET bounce_type = p_bounce_type
             WHERE group_id = v_gid AND token_id = v_tid AND bounced_at IS NULL;
        ELSIF p_event = 'Complaint' THEN
            UPDATE deliveries SET complained_at = now()
             WHERE group_id = v_gid AND token_id = v_tid AND complained_at IS NULL;
            v_first := FOUND;
            IF v_first THEN PERFORM mailroom_reputation_add(v_gid, 0, 0, 0, 1); END IF;
        ELSIF p_event = 'Reject' THEN
            UPDATE deliveries SET rejected_at = now()
             WHERE group_id = v_gid AND token_id = v_tid AND rejected_at IS NULL;
        END IF;
    END IF;

    IF p_event = 'Bounce' AND p_bounce_type = 'Permanent' THEN
        PERFORM mailroom_suppress_addresses(p_recipients, 'hard_bounce',
                                            'ses bounce: Permanent ' || p_detail);
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
                format('ses bounce: %s transient bounces within 7 days %s', p_soft_limit, p_detail));
        END IF;
    ELSIF p_event = 'Complaint' THEN
        PERFORM mailroom_suppress_addresses(p_recipients, 'complaint', 'ses complaint ' || p_detail);
    END IF;

    RETURN CASE WHEN v_gid IS NULL THEN 'unmatched' ELSE 'recorded' END;
END;
$$;

-- Per group, the counters of the last `p_window_seconds` (whole hours: the current hour and
-- the hours that started within the window).
CREATE FUNCTION mailroom_reputation(p_window_seconds INT)
    RETURNS TABLE (group_name TEXT, sent BIGINT, delivered BIGINT, bounced BIGINT,
                   complained BIGINT)
    LANGUAGE sql STABLE AS $$
    SELECT g.name, coalesce(sum(r.sent), 0)::BIGINT, coalesce(sum(r.delivered), 0)::BIGINT,
           coalesce(sum(r.bounced), 0)::BIGINT, coalesce(sum(r.complained), 0)::BIGINT
      FROM consumer_groups g
      LEFT JOIN reputation_hourly r
        ON r.group_id = g.id
       AND r.hour > now() - make_interval(secs => p_window_seconds) - interval '1 hour'
     GROUP BY g.name
     ORDER BY g.name;
$$;
