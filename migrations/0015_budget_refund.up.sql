-- The unused part of a dead sender's grants comes back (issue 11 §1).
--
-- Migration 0011 only takes money back from a live holder (mailroom_budget_return), so the
-- grants of a sender killed with kill -9 stayed charged: the collector could not tell the
-- emails it never used from those it sent and never acknowledged. This migration counts, per
-- subscription linked to a grant holder (SubscribeRequest.budget_holder), the jobs handed to it
-- and the jobs it settled without sending. A sender spends a grant email only on a job leased
-- to one of its subscriptions, so the emails holder H may have spent are at most
--     possible_spend(H) = sum over H's subscriptions of (handed - settled_unsent)
-- where settled_unsent counts outcomes other than SENT that mailroom_ack recorded and jobs
-- handed back unsent (Store::Release). A lease that ran out without an outcome stays counted:
-- its job may have been sent. What is safe to give back is
--     granted(H) - returned(H) - possible_spend(H),    when > 0,
-- over H's grants still in budget_grants (pruned grants only lower it).
--
-- mailroom_budget_refund gives it back for every holder that
-- * has at least one linked subscription (a holder nobody linked may be spending through
--   subscriptions the collector cannot attribute to it: nothing comes back for it),
-- * holds no unexpired grant, and whose grants all expired more than the margin ago (the
--   collector passes the grant lease): a live sender never uses an expired grant, the margin
--   covers clock skew, and
-- * none of whose linked subscriptions holds a lease that has not run out.
-- A linked holder that was never handed a job can only have spent 0: all its unused grant
-- comes back. The credit goes to the holder's grants (returned_emails, budget_months
-- .returned_micros), exactly as mailroom_budget_return does, and marks them refunded:
-- mailroom_budget_return then credits nothing more for them (a late return from a sender
-- that was only partitioned away would otherwise be counted twice). After a refund
-- granted - returned = possible_spend, so a second call refunds 0.
--
-- Counting is cheap: the collector bumps `handed` with one statement per dequeue call of a
-- linked subscription (mailroom_budget_handed), and `settled_unsent` once per acknowledgement
-- or release that had any (mailroom_budget_settled).

CREATE TABLE budget_subscriptions (
    group_id       INT NOT NULL REFERENCES consumer_groups (id) ON DELETE CASCADE,
    owner          TEXT NOT NULL,  -- the subscription (deliveries.owner, subscriber_id)
    holder         TEXT NOT NULL,  -- the grant holder it spends for (budget_grants.holder)
    handed         BIGINT NOT NULL DEFAULT 0 CHECK (handed >= 0),
    settled_unsent BIGINT NOT NULL DEFAULT 0 CHECK (settled_unsent >= 0),
    updated_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (group_id, owner)
);
CREATE INDEX budget_subscriptions_holder_idx ON budget_subscriptions (group_id, holder);

ALTER TABLE budget_grants ADD COLUMN refunded BOOLEAN NOT NULL DEFAULT false;

-- p_n jobs were leased to subscription p_owner, linked to p_holder (creates its row; p_n may
-- be 0 to register the link).
CREATE FUNCTION mailroom_budget_handed(p_group TEXT, p_owner TEXT, p_holder TEXT, p_n INT)
    RETURNS VOID
    LANGUAGE sql AS $$
    INSERT INTO budget_subscriptions AS s (group_id, owner, holder, handed)
    SELECT g.id, p_owner, p_holder, p_n FROM consumer_groups g WHERE g.name = p_group
    ON CONFLICT (group_id, owner) DO UPDATE
       SET handed = s.handed + EXCLUDED.handed, updated_at = now();
$$;

-- p_n jobs leased to subscription p_owner were settled without being sent. No-op for a
-- subscription that is not linked to a holder.
CREATE FUNCTION mailroom_budget_settled(p_group TEXT, p_owner TEXT, p_n INT)
    RETURNS VOID
    LANGUAGE sql AS $$
    UPDATE budget_subscriptions s SET settled_unsent = s.settled_unsent + p_n, updated_at = now()
      FROM consumer_groups g
     WHERE g.name = p_group AND s.group_id = g.id AND s.owner = p_owner;
$$;

-- Gives back the safe remainder of every dead holder's grants (see the header); returns one
-- row per holder refunded.
CREATE FUNCTION mailroom_budget_refund(p_margin_ms INT)
    RETURNS TABLE (group_name TEXT, holder TEXT, emails BIGINT)
    LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    h        RECORD;
    gr       RECORD;
    v_cutoff TIMESTAMPTZ := now() - make_interval(secs => greatest(p_margin_ms, 0) / 1000.0);
    v_left   BIGINT;
    v_n      INT;
BEGIN
    FOR h IN
        SELECT bg.group_id, bg.holder
          FROM budget_grants bg
         WHERE EXISTS (SELECT 1 FROM budget_subscriptions s
                        WHERE s.group_id = bg.group_id AND s.holder = bg.holder)
         GROUP BY bg.group_id, bg.holder
        HAVING max(bg.expires_at) < v_cutoff AND sum(bg.emails - bg.returned_emails) > 0
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
        SELECT (SELECT coalesce(sum(bg.emails - bg.returned_emails), 0)
                  FROM budget_grants bg
                 WHERE bg.group_id = h.group_id AND bg.holder = h.holder)
             - (SELECT coalesce(sum(greatest(s.handed - s.settled_unsent, 0)), 0)
                  FROM budget_subscriptions s
                 WHERE s.group_id = h.group_id AND s.holder = h.holder)
          INTO v_left;
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

-- 0011's return, except that a refunded grant takes nothing more back.
CREATE OR REPLACE FUNCTION mailroom_budget_return(p_group TEXT, p_holder TEXT, p_grant BIGINT,
                                                  p_emails INT)
    RETURNS INT
    LANGUAGE plpgsql AS $$
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
