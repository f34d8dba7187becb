-- What mailroom_budget_refund would give back for holder p_holder now, without locks. Called by
-- mailroom_budget_refund and mailroom_prune_budget_grants (a grant of a holder with something
-- to give back is kept).
CREATE OR REPLACE FUNCTION mailroom.mailroom_budget_unspent(p_gid integer, p_holder text) RETURNS bigint
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
    SELECT (SELECT coalesce(sum(bg.emails - bg.returned_emails), 0)
              FROM budget_grants bg
             WHERE bg.group_id = p_gid AND bg.holder = p_holder)
         - (SELECT coalesce(sum(greatest(s.handed - s.settled_unsent, 0)), 0)
              FROM budget_subscriptions s
             WHERE s.group_id = p_gid AND s.holder = p_holder);
$$;
