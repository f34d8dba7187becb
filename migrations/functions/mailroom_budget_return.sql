-- p_holder gives back p_emails unused emails of its grant p_grant: they are credited to the
-- grant's month and never sent. Called by the collector's ReturnBudget. Returns the emails
-- credited (0: not this holder's grant, nothing left to return, or a grant already refunded).
-- Money given back does not refill the pace bucket.
CREATE OR REPLACE FUNCTION mailroom.mailroom_budget_return(p_group text, p_holder text, p_grant bigint, p_emails integer) RETURNS integer
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
DECLARE
    g budget_grants%ROWTYPE;
    v_n INT;
BEGIN
    SELECT bg.* INTO g FROM budget_grants bg JOIN consumer_groups c ON c.id = bg.group_id
     WHERE bg.id = p_grant AND c.name = p_group AND bg.holder = p_holder
       FOR UPDATE OF bg;
    IF NOT FOUND OR g.refunded THEN RETURN 0; END IF;
    v_n := least(greatest(p_emails, 0), g.emails - g.returned_emails);
    IF v_n = 0 THEN RETURN 0; END IF;
    UPDATE budget_grants SET returned_emails = returned_emails + v_n WHERE id = g.id;
    UPDATE budget_months SET returned_micros = returned_micros + v_n * g.price_micros
     WHERE group_id = g.group_id AND month = g.month;
    RETURN v_n;
END;
$$;
