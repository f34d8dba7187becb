-- Gives back the unused part of every dead holder's grants: granted - returned - (jobs handed to
-- its linked subscriptions - those settled unsent), when positive. Called by the retention pass
-- with the grant lease as p_margin_ms. A holder with a live job or batch lease, an unexpired
-- grant, a grant expired within the margin, or no linked subscription gets nothing; refunded
-- grants take no later return, so a second call refunds 0. Returns one row per holder refunded
-- (docs/design.md, "A killed sender's grants come back").
CREATE OR REPLACE FUNCTION mailroom.mailroom_budget_refund(p_margin_ms integer) RETURNS TABLE(group_name text, holder text, emails bigint)
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
#variable_conflict use_column
DECLARE
    h        RECORD;
    gr       RECORD;
    v_cutoff TIMESTAMPTZ := now() - make_interval(secs => greatest(p_margin_ms, 0) / 1000.0);
    v_left   BIGINT;
    v_n      INT;
BEGIN
    FOR h IN
        -- A linked holder whose newest grant expired before the cut-off (one index probe:
        -- max() of budget_grants_holder_idx's last column) and with something to give back.
        -- The lateral aggregate runs per holder, so the planner cannot turn it into a scan of
        -- every grant; the CASE sums a holder's grants only after its probe (a qual on l
        -- alone could be evaluated first, for every holder).
        SELECT l.group_id, l.holder
          FROM (SELECT DISTINCT s.group_id, s.holder FROM budget_subscriptions s) l
         CROSS JOIN LATERAL (SELECT max(bg.expires_at) AS newest FROM budget_grants bg
                              WHERE bg.group_id = l.group_id AND bg.holder = l.holder) n
         WHERE CASE WHEN n.newest < v_cutoff
                    THEN mailroom_budget_unspent(l.group_id, l.holder) > 0
                    ELSE false END
    LOOP
        -- The lock mailroom_budget_return takes too; then everything is read again under it.
        PERFORM 1 FROM budget_grants bg
          WHERE bg.group_id = h.group_id AND bg.holder = h.holder
          ORDER BY bg.id FOR UPDATE;
        CONTINUE WHEN EXISTS (SELECT 1 FROM budget_grants bg
                               WHERE bg.group_id = h.group_id AND bg.holder = h.holder
                                 AND bg.expires_at >= v_cutoff);
        CONTINUE WHEN EXISTS (SELECT 1 FROM budget_subscriptions s
                                JOIN deliveries d ON d.owner = s.owner AND d.group_id = s.group_id
                               WHERE s.group_id = h.group_id AND s.holder = h.holder
                                 AND d.state = 'leased' AND d.due_at > now());
        CONTINUE WHEN EXISTS (SELECT 1 FROM budget_subscriptions s
                                JOIN lease_batches b ON b.owner = s.owner
                                                    AND b.group_id = s.group_id
                               WHERE s.group_id = h.group_id AND s.holder = h.holder
                                 AND b.state = 'leased' AND b.due_at > now());
        v_left := mailroom_budget_unspent(h.group_id, h.holder);  -- under the lock
        CONTINUE WHEN v_left <= 0;
        group_name := (SELECT c.name FROM consumer_groups c WHERE c.id = h.group_id);
        holder := h.holder;
        emails := v_left;
        -- Newest grants first (the current month's, when a month ended in between).
        FOR gr IN
            SELECT bg.id, bg.month, bg.price_micros, bg.emails - bg.returned_emails AS room
              FROM budget_grants bg
             WHERE bg.group_id = h.group_id AND bg.holder = h.holder
               AND bg.returned_emails < bg.emails
             ORDER BY bg.id DESC
        LOOP
            EXIT WHEN v_left = 0;
            v_n := least(v_left, gr.room);
            UPDATE budget_grants SET returned_emails = returned_emails + v_n WHERE id = gr.id;
            UPDATE budget_months SET returned_micros = returned_micros + v_n * gr.price_micros
             WHERE group_id = h.group_id AND month = gr.month;
            v_left := v_left - v_n;
        END LOOP;
        UPDATE budget_grants bg SET refunded = true
         WHERE bg.group_id = h.group_id AND bg.holder = h.holder;
        RETURN NEXT;
    END LOOP;
END;
$$;
