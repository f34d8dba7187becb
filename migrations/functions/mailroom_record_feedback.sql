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
-- In parts: the match (mailroom_feedback_match), the delivery's record
-- (mailroom_feedback_apply), the suppression (mailroom_feedback_suppress).
CREATE OR REPLACE FUNCTION mailroom.mailroom_record_feedback(p_event_key text, p_provider text, p_event text, p_message_ids text[], p_group text, p_job_id bigint, p_recipients text[], p_bounce_type text, p_detail text, p_soft_limit integer, p_scope_group text DEFAULT '', p_suppress_unmatched boolean DEFAULT false) RETURNS text
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
DECLARE
    v_gid    INT;
    v_tid    BIGINT;
    v_to     TEXT;     -- the matched delivery's recipient, normalised
    v_scope  INT;      -- p_scope_group's id (NULL: every group, or no such group)
    v_group  TEXT := p_group;
    v_reason TEXT := 'no_delivery';
    v_rcpt   TEXT[];   -- p_recipients, normalised
    v_target TEXT[] := '{}';  -- the addresses a bounce or complaint suppresses
    v_wrote  BOOLEAN;
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
    SELECT * INTO v_gid, v_tid, v_to, v_reason
      FROM mailroom.mailroom_feedback_match(p_provider, p_message_ids, v_group, p_job_id, v_rcpt,
                                            p_scope_group, v_scope, v_reason);
    IF v_gid IS NOT NULL THEN
        v_target := ARRAY[v_to];
        PERFORM mailroom.mailroom_feedback_apply(v_gid, v_tid, p_provider, p_event, p_bounce_type,
                                                 p_detail);
    ELSIF p_suppress_unmatched AND p_scope_group = '' THEN
        v_target := v_rcpt;
    END IF;
    v_wrote := mailroom.mailroom_feedback_suppress(v_target, p_provider, p_event, p_bounce_type,
                                                   p_detail, p_soft_limit);
    IF v_gid IS NOT NULL THEN
        RETURN 'recorded';
    END IF;
    RETURN 'unmatched:' || v_reason || CASE WHEN v_wrote THEN ':suppressed' ELSE '' END;
END;
$$;
