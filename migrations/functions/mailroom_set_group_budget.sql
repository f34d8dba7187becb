-- Sets group p_group's budget for an operator, each setting kept unless given: the monthly
-- budget (p_budget_default: back to the collector's default; else p_budget, NULL keeps it), the
-- recovery reserve (p_reserve_default, else p_reserve, NULL keeps it) and the burst (p_burst,
-- NULL keeps it). The table's checks refuse values out of range (check_violation). Returns
-- false, changing nothing, for an unknown group. Called by the collector's SetGroupBudget, in
-- the transaction that reads the result back (mailroom_group_budget).
CREATE OR REPLACE FUNCTION mailroom.mailroom_set_group_budget(p_group text, p_budget_default boolean, p_budget bigint, p_reserve_default boolean, p_reserve integer, p_burst integer) RETURNS boolean
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
BEGIN
    INSERT INTO group_budgets (group_id)
    SELECT g.id FROM consumer_groups g WHERE g.name = p_group
    ON CONFLICT DO NOTHING;
    UPDATE group_budgets b
       SET monthly_budget_micros = CASE WHEN p_budget_default THEN NULL
                                        ELSE coalesce(p_budget, b.monthly_budget_micros) END,
           recovery_reserve_percent = CASE WHEN p_reserve_default THEN NULL
                                           ELSE coalesce(p_reserve, b.recovery_reserve_percent) END,
           burst = coalesce(p_burst, b.burst),
           updated_at = now()
      FROM consumer_groups g
     WHERE g.name = p_group AND b.group_id = g.id;
    RETURN FOUND;  -- false: an unknown group
END
$$;
