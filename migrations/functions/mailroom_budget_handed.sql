-- p_n jobs were leased to subscription p_owner, linked to p_holder (creates its row; p_n may
-- be 0 to register the link). Called by the collector's dequeue for subscriptions that name a
-- budget holder, in the dequeue's transaction; the count bounds what mailroom_budget_refund
-- gives back (docs/design.md, "A killed sender's grants come back").

CREATE OR REPLACE FUNCTION mailroom.mailroom_budget_handed(p_group text, p_owner text, p_holder text, p_n integer) RETURNS void
    LANGUAGE sql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
    INSERT INTO budget_subscriptions AS s (group_id, owner, holder, handed)
    SELECT g.id, p_owner, p_holder, p_n FROM consumer_groups g WHERE g.name = p_group
    ON CONFLICT (group_id, owner) DO UPDATE
       SET handed = s.handed + EXCLUDED.handed, updated_at = now();
$$;
