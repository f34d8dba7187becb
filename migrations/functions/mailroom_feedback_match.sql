-- The match of mailroom_record_feedback: the delivery an event of path p_provider names, by one
-- of p_message_ids (deliveries.provider_message_id), else by the tags' job p_job_id of group
-- p_group ('' / 0 when absent: a job still leased in a batch, or acknowledged SENT in one
-- without a message id, gets a row of its own here to record the event on). A delivery matches
-- only when its recipient (the token's to_address, else its account's email, as
-- lower(btrim(address))) is one of p_recipients (normalised), its group is p_scope (the id of
-- p_scope_group, when that is not '') and the path may reach what its provider sent
-- (mailroom_feedback_reaches). Returns the delivery's group, token and recipient, or NULLs and
-- why not (p_reason, or recipient, provider, other_group).
CREATE OR REPLACE FUNCTION mailroom.mailroom_feedback_match(p_provider text, p_message_ids text[], p_group text, p_job_id bigint, p_recipients text[], p_scope_group text, p_scope integer, p_reason text, OUT o_gid integer, OUT o_tid bigint, OUT o_to text, OUT o_reason text)
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
DECLARE
    v_bg  INT;
    v_by  TEXT;     -- the provider that sent the tags' job (deliveries.provider)
    v_why TEXT;
BEGIN
    o_reason := p_reason;
    IF coalesce(array_length(p_message_ids, 1), 0) > 0 THEN
        SELECT d.group_id, d.token_id, lower(btrim(coalesce(t.to_address, a.email::TEXT)))
          INTO o_gid, o_tid, o_to
          FROM mailroom.deliveries d
          JOIN mailroom.tokens t ON t.id = d.token_id
          LEFT JOIN mailroom.accounts a ON a.id = t.account
         WHERE d.provider_message_id = ANY (p_message_ids)
           AND (p_scope_group = '' OR d.group_id = p_scope)
           AND mailroom.mailroom_feedback_reaches(p_provider, d.provider)
           AND lower(btrim(coalesce(t.to_address, a.email::TEXT))) = ANY (p_recipients)
         LIMIT 1;
        IF o_gid IS NULL THEN
            -- Why not, for the operator's counter: a delivery with the id exists, but for
            -- another address, sent by another provider, or in another group.
            SELECT CASE WHEN bool_or((p_scope_group = '' OR d.group_id IS NOT DISTINCT FROM p_scope)
                                     AND mailroom.mailroom_feedback_reaches(p_provider, d.provider))
                        THEN 'recipient'
                        WHEN bool_or(p_scope_group = '' OR d.group_id IS NOT DISTINCT FROM p_scope)
                        THEN 'provider'
                        ELSE 'other_group' END
              INTO v_why
              FROM mailroom.deliveries d
             WHERE d.provider_message_id = ANY (p_message_ids)
            HAVING count(*) > 0;
            o_reason := coalesce(v_why, o_reason);
        END IF;
    END IF;
    IF o_gid IS NOT NULL OR p_group = '' OR p_job_id <= 0 THEN
        RETURN;
    END IF;
    o_to := NULL;
    SELECT g.id INTO v_bg FROM mailroom.consumer_groups g WHERE g.name = p_group;
    SELECT lower(btrim(coalesce(t.to_address, a.email::TEXT))) INTO o_to
      FROM mailroom.tokens t LEFT JOIN mailroom.accounts a ON a.id = t.account
     WHERE t.id = p_job_id;
    IF v_bg IS NOT NULL AND o_to IS NOT NULL AND NOT (o_to = ANY (p_recipients)) THEN
        IF o_reason = 'no_delivery' THEN o_reason := 'recipient'; END IF;
    ELSIF v_bg IS NOT NULL AND o_to IS NOT NULL THEN
        SELECT d.group_id, d.token_id, d.provider INTO o_gid, o_tid, v_by
          FROM mailroom.deliveries d
         WHERE d.group_id = v_bg AND d.token_id = p_job_id;
        IF o_gid IS NOT NULL AND NOT mailroom.mailroom_feedback_reaches(p_provider, v_by) THEN
            o_gid := NULL;
            o_tid := NULL;
            o_reason := 'provider';
        ELSIF o_gid IS NULL AND (mailroom.mailroom_batch_unpack(v_bg, p_job_id)
                              OR mailroom.mailroom_batch_keep_sent(v_bg, p_job_id)) THEN
            o_gid := v_bg;
            o_tid := p_job_id;
        END IF;
    END IF;
END;
$$;
