-- Called after mailroom_ack, in its transaction, for the SENT outcomes it recorded: counts
-- `p_sent` emails sent and stores the provider message ids of jobs `p_ids` (only those that
-- have one: SMTP and file deliveries cost no second write of their rows). Returns how many
-- deliveries got their message id.

CREATE OR REPLACE FUNCTION mailroom.mailroom_record_sent(p_group text, p_sent bigint, p_ids bigint[], p_message_ids text[]) RETURNS integer
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
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
    PERFORM mailroom_reputation_add(v_gid, '', p_sent, 0, 0, 0);
    RETURN v_n;
END;
$$;
