-- Per group, the sent, delivered, bounced and complained counters of the last p_window_seconds
-- (whole hours: the current hour and the hours that started within the window). Called by the
-- feedback store for the reputation guard and the gauges. Reads only.

CREATE OR REPLACE FUNCTION mailroom.mailroom_reputation(p_window_seconds integer) RETURNS TABLE(group_name text, sent bigint, delivered bigint, bounced bigint, complained bigint)
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
    SELECT g.name, coalesce(sum(r.sent), 0)::BIGINT, coalesce(sum(r.delivered), 0)::BIGINT,
           coalesce(sum(r.bounced), 0)::BIGINT, coalesce(sum(r.complained), 0)::BIGINT
      FROM consumer_groups g
      LEFT JOIN reputation_hourly r
        ON r.group_id = g.id
       AND r.hour > now() - make_interval(secs => p_window_seconds) - interval '1 hour'
     GROUP BY g.name
     ORDER BY g.name;
$$;
