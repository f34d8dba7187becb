-- Adds to the current hour's counters of a group (one new delta row).

CREATE OR REPLACE FUNCTION mailroom.mailroom_reputation_add(p_group_id integer, p_sent bigint, p_delivered bigint, p_bounced bigint, p_complained bigint) RETURNS void
    LANGUAGE sql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
    INSERT INTO reputation_hourly (group_id, hour, sent, delivered, bounced, complained)
    VALUES (p_group_id, date_trunc('hour', now()), p_sent, p_delivered, p_bounced, p_complained);
$$;
