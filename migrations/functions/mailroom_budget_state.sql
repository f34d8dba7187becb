-- The group's month as the budget sees it (default budget and reserve given by the collector).
-- Called by mailroom_budget_grant, mailroom_budget_recovery_first and the collector's budget
-- store when it reads a group's budget (GetUsage). Reads only; locks nothing.

CREATE OR REPLACE FUNCTION mailroom.mailroom_budget_state(p_gid integer, p_default_budget bigint, p_default_reserve integer, OUT budget_micros bigint, OUT reserve_percent integer, OUT burst integer, OUT committed_micros bigint, OUT spent_micros bigint, OUT sent bigint, OUT granted_micros bigint, OUT returned_micros bigint, OUT month date, OUT seconds_left double precision) RETURNS record
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
    WITH m AS (SELECT date_trunc('month', now() AT TIME ZONE 'UTC')::DATE AS month)
    SELECT coalesce(b.monthly_budget_micros, p_default_budget),
           coalesce(b.recovery_reserve_percent, p_default_reserve),
           coalesce(b.burst, 10),
           greatest(coalesce(bm.granted_micros - bm.returned_micros, 0),
                    coalesce(u.cost_micros, 0)),
           coalesce(u.cost_micros, 0), coalesce(u.sent, 0),
           coalesce(bm.granted_micros, 0), coalesce(bm.returned_micros, 0),
           m.month,
           greatest(1e-3, EXTRACT(EPOCH FROM ((m.month + INTERVAL '1 month') AT TIME ZONE 'UTC')
                                             - now())::DOUBLE PRECISION)
      FROM m
      LEFT JOIN group_budgets b ON b.group_id = p_gid
      LEFT JOIN budget_months bm ON bm.group_id = p_gid AND bm.month = m.month
      LEFT JOIN group_usage u ON u.group_id = p_gid AND u.month = m.month;
$$;
