-- Group p_group's budget for an operator: this month (YYYY-MM), the budget (NULL unlimited)
-- and reserve in force and whether each is the collector's default (p_default_budget,
-- p_default_reserve: MAILROOM_DEFAULT_GROUP_BUDGET and its reserve), the burst, the month's
-- committed, granted, returned and spent micros and emails sent, the micros of live grants not
-- returned, and the pace left (micros per second; Infinity when unlimited). No row for an
-- unknown group. Reads only. Called by the collector's GetGroupBudget and SetGroupBudget.
CREATE OR REPLACE FUNCTION mailroom.mailroom_group_budget(p_group text, p_default_budget bigint, p_default_reserve integer) RETURNS TABLE(month text, budget_micros bigint, budget_is_default boolean, reserve_percent integer, reserve_is_default boolean, burst integer, committed_micros bigint, granted_micros bigint, returned_micros bigint, spent_micros bigint, sent bigint, outstanding_micros bigint, pace_micros_per_second double precision)
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
    SELECT to_char(s.month, 'YYYY-MM'), s.budget_micros, b.monthly_budget_micros IS NULL,
           s.reserve_percent, b.recovery_reserve_percent IS NULL, s.burst, s.committed_micros,
           s.granted_micros, s.returned_micros, s.spent_micros, s.sent,
           (SELECT coalesce(sum((bg.emails - bg.returned_emails) * bg.price_micros), 0)::BIGINT
              FROM budget_grants bg WHERE bg.group_id = g.id AND bg.expires_at > now()),
           CASE WHEN s.budget_micros IS NULL THEN 'Infinity'::DOUBLE PRECISION
                ELSE greatest(s.budget_micros - s.committed_micros, 0) / s.seconds_left END
      FROM consumer_groups g
      LEFT JOIN group_budgets b ON b.group_id = g.id
     CROSS JOIN LATERAL mailroom_budget_state(g.id, p_default_budget, p_default_reserve) s
     WHERE g.name = p_group;
$$;
