-- Part of mailroom_record_feedback: records event p_event (Delivery, Bounce with p_bounce_type,
-- Complaint with p_detail, Reject) of path p_provider on the delivery (p_gid, p_tid) it
-- matched. Each kind counts once per delivery (SES may report a delivery twice) in the group's
-- reputation and stages the application's event (email_events_staged): 'delivered' and
-- 'complained' the first of their kind, 'bounced' (detail: the bounce type) a Permanent bounce
-- the first time and a Transient or Undetermined one each time until it is bounced; a Reject
-- stages none. The events name the group and the provider whose feedback they are (the ledger's columns).
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
            INSERT INTO mailroom.email_events_staged (token_id, event, group_id, provider)
            VALUES (p_tid, 'delivered', p_gid, p_provider);
        END IF;
    ELSIF p_event = 'Bounce' AND p_bounce_type = 'Permanent' THEN
        UPDATE mailroom.deliveries SET bounced_at = now(), bounce_type = p_bounce_type
         WHERE group_id = p_gid AND token_id = p_tid AND bounced_at IS NULL;
        IF FOUND THEN
            PERFORM mailroom.mailroom_reputation_add(p_gid, p_provider, 0, 0, 1, 0);
            INSERT INTO mailroom.email_events_staged (token_id, event, detail, group_id, provider)
            VALUES (p_tid, 'bounced', p_bounce_type, p_gid, p_provider);
        END IF;
    ELSIF p_event = 'Bounce' THEN
        UPDATE mailroom.deliveries SET bounce_type = p_bounce_type
         WHERE group_id = p_gid AND token_id = p_tid AND bounced_at IS NULL;
        IF FOUND THEN
            INSERT INTO mailroom.email_events_staged (token_id, event, detail, group_id, provider)
            VALUES (p_tid, 'bounced', p_bounce_type, p_gid, p_provider);
        END IF;
    ELSIF p_event = 'Complaint' THEN
        UPDATE mailroom.deliveries SET complained_at = now()
         WHERE group_id = p_gid AND token_id = p_tid AND complained_at IS NULL;
        IF FOUND THEN
            PERFORM mailroom.mailroom_reputation_add(p_gid, p_provider, 0, 0, 0, 1);
            INSERT INTO mailroom.email_events_staged (token_id, event, detail, group_id, provider)
            VALUES (p_tid, 'complained', NULLIF(p_detail, ''), p_gid, p_provider);
        END IF;
    ELSIF p_event = 'Reject' THEN
        UPDATE mailroom.deliveries SET rejected_at = now()
         WHERE group_id = p_gid AND token_id = p_tid AND rejected_at IS NULL;
    END IF;
END;
$$;
