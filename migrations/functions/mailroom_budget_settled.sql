-- p_n jobs leased to subscription p_owner were settled without being sent. Called by the
-- collector's acknowledgements and releases that had any. No-op for a subscription that is not
-- linked to a holder.

CREATE OR REPLACE FUNCTION mailroom.mailroom_budget_settled(p_group text, p_owner text, p_n integer) RETURNS void
    LANGUAGE sql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
    UPDATE budget_subscriptions s SET settled_unsent = s.settled_unsent + p_n, updated_at = now()
      FROM consumer_groups g
     WHERE g.name = p_group AND s.group_id = g.id AND s.owner = p_owner;
$$;
