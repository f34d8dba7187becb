-- This calendar month's (UTC) usage of group p_group: the month as YYYY-MM, emails sent and their
-- cost in micros; zeros for a group with none this month or an unknown group. Always one row.
-- Called by the collector's GetUsage.
CREATE OR REPLACE FUNCTION mailroom.mailroom_usage(p_group text) RETURNS TABLE(month text, sent bigint, cost_micros bigint)
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
    SELECT to_char(date_trunc('month', now() AT TIME ZONE 'UTC'), 'YYYY-MM'),
           coalesce(u.sent, 0)::BIGINT, coalesce(u.cost_micros, 0)::BIGINT
      FROM (SELECT 1) one
      LEFT JOIN consumer_groups g ON g.name = p_group
      LEFT JOIN group_usage u ON u.group_id = g.id
       AND u.month = date_trunc('month', now() AT TIME ZONE 'UTC')::DATE;
$$;
