-- What group p_group sent and what its providers reported, hour by hour, for the last p_hours
-- hours (1 to 168) up to the current one: one row per hour (Unix seconds of its start), every
-- provider summed, hours without a row as zeros. From reputation_hourly (the SENT outcomes
-- counted by mailroom_record_sent, the feedback by mailroom_reputation_add). Raises
-- no_data_found for an unknown group. Read by the collector's console for its charts.
CREATE OR REPLACE FUNCTION mailroom.mailroom_group_hourly(p_group text, p_hours integer)
    RETURNS TABLE (hour bigint, sent bigint, delivered bigint, bounced bigint, complained bigint)
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
#variable_conflict use_column
DECLARE
    v_gid  INT;
    v_last TIMESTAMPTZ := date_trunc('hour', now());
    v_n    INT := least(greatest(coalesce(p_hours, 24), 1), 168);
BEGIN
    v_gid := mailroom_group_id(p_group);
    RETURN QUERY
    SELECT extract(epoch FROM h.h)::bigint, coalesce(sum(r.sent), 0)::bigint,
           coalesce(sum(r.delivered), 0)::bigint, coalesce(sum(r.bounced), 0)::bigint,
           coalesce(sum(r.complained), 0)::bigint
      FROM generate_series(v_last - make_interval(hours => v_n - 1), v_last, interval '1 hour')
               AS h(h)
      LEFT JOIN reputation_hourly r ON r.group_id = v_gid AND r.hour = h.h
     GROUP BY h.h
     ORDER BY h.h;
END;
$$;
