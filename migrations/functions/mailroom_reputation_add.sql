-- Adds to the current hour's counters of a group and provider (one new delta row). Called by
-- mailroom_record_sent (provider '': an acknowledgement does not say which provider sent) and
-- mailroom_record_feedback (the provider the event came from).

CREATE OR REPLACE FUNCTION mailroom.mailroom_reputation_add(p_group_id integer, p_provider text, p_sent bigint, p_delivered bigint, p_bounced bigint, p_complained bigint) RETURNS void
    LANGUAGE sql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
    INSERT INTO reputation_hourly (group_id, provider, hour, sent, delivered, bounced, complained)
    VALUES (p_group_id, p_provider, date_trunc('hour', now()), p_sent, p_delivered, p_bounced,
            p_complained);
$$;
