-- Part of mailroom_dequeue_new, for group p_group_id (whose row lock the caller holds): leases
-- the tokens of one stretch of class p_class's window (p_tokens, as mailroom_dequeue_scan read
-- them) to p_owner until p_due: those to hand out (skip NULL) as one lease_batches row, one bit
-- each (`recovery` for the critical class), returned in their order; the others are recorded
-- as deliveries with their state and reason (expired, superseded, rate_limited, suppressed;
-- cancelled for a token consumed or an account in the wrong status), so that every token of
-- the group ends with an outcome and a reason.
-- Called by mailroom_dequeue only: its statements are planned under that function's settings.
CREATE OR REPLACE FUNCTION mailroom.mailroom_dequeue_claim(p_group_id integer, p_class mailroom.action_priority, p_owner text, p_due timestamp with time zone, p_tokens mailroom.dequeue_token[]) RETURNS SETOF mailroom.dequeue_token
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
BEGIN
    RETURN QUERY
    WITH r AS (
        SELECT * FROM unnest(p_tokens) r WHERE r.skip IS NULL
    ), ins AS (
        INSERT INTO lease_batches (group_id, owner, recovery, due_at, ids, done, kept, lo_id,
                                   hi_id)
        SELECT p_group_id, p_owner, p_class = 'critical', p_due, array_agg(r.id),
               repeat('0', count(*)::INT)::VARBIT, repeat('0', count(*)::INT)::VARBIT,
               min(r.id), max(r.id)
          FROM r
        HAVING count(*) > 0
    )
    SELECT * FROM r;
    IF EXISTS (SELECT 1 FROM unnest(p_tokens) x WHERE x.skip IS NOT NULL) THEN
        INSERT INTO deliveries (group_id, token_id, state, attempts, reason, recovery)
        SELECT p_group_id, x.id,
               (CASE WHEN x.skip IN ('expired', 'superseded', 'rate_limited', 'suppressed')
                          THEN x.skip
                     ELSE 'cancelled' END)::delivery_state,
               0, x.reason, p_class = 'critical'
          FROM unnest(p_tokens) x
         WHERE x.skip IS NOT NULL
        ON CONFLICT DO NOTHING;
    END IF;
END;
$$;
