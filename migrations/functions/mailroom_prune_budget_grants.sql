-- Deletes, among the next p_batch grants after id p_after, those that expired before p_before
-- and can no longer matter (refunded, fully returned, of a holder with no linked subscription,
-- or of a holder with no newer grant and nothing to give back). Called by the retention pass.
-- Never makes any holder's refund larger (docs/design.md, "Pruning grants never makes a refund
-- larger"). Rows another transaction holds are skipped. Returns as mailroom_prune_deliveries
-- (false at the end, or at a batch that deletes nothing and reaches p_before: ids follow time).
CREATE OR REPLACE FUNCTION mailroom.mailroom_prune_budget_grants(p_after bigint, p_before timestamp with time zone, p_batch integer) RETURNS TABLE(pruned bigint, last_id bigint, more boolean)
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    SET enable_seqscan TO 'off'
    SET enable_bitmapscan TO 'off'
    SET jit TO 'off'
    AS $$
DECLARE
    v_ids    BIGINT[];
    v_seen   INT;
    v_last   BIGINT;
    v_newest TIMESTAMPTZ;
    v_n      BIGINT;
BEGIN
    SELECT count(*), max(w.id), max(w.expires_at)
      INTO v_seen, v_last, v_newest
      FROM (SELECT g.id, g.expires_at FROM budget_grants g
             WHERE g.id > p_after ORDER BY g.id LIMIT p_batch) w;
    -- The holder-wide conditions are decided once per holder of the window, not per row.
    WITH w AS (
        SELECT g.id, g.group_id, g.holder, g.refunded, g.emails, g.returned_emails
          FROM budget_grants g
         WHERE g.id > p_after AND g.id <= coalesce(v_last, p_after) AND g.expires_at < p_before
    ), h AS (
        SELECT DISTINCT w.group_id, w.holder FROM w
    ), gone AS (
        SELECT h.group_id, h.holder
          FROM h
         WHERE NOT EXISTS (SELECT 1 FROM budget_subscriptions s
                            WHERE s.group_id = h.group_id AND s.holder = h.holder)
            OR ((SELECT max(g.expires_at) FROM budget_grants g
                  WHERE g.group_id = h.group_id AND g.holder = h.holder) < p_before
                AND mailroom_budget_unspent(h.group_id, h.holder) <= 0)
    )
    SELECT array_agg(w.id) INTO v_ids
      FROM w
     WHERE w.refunded OR w.returned_emails = w.emails
        OR EXISTS (SELECT 1 FROM gone WHERE gone.group_id = w.group_id
                                        AND gone.holder = w.holder);
    v_n := 0;
    IF v_ids IS NOT NULL THEN
        -- Deleting any grant row can only lower a refund : the conditions above, read
        -- without locks, decide what is worth keeping, not what is safe.
        WITH victims AS (
            SELECT g.id FROM budget_grants g
             WHERE g.id = ANY (v_ids) AND g.expires_at < p_before
               FOR UPDATE SKIP LOCKED
        ), del AS (
            DELETE FROM budget_grants g USING victims v WHERE g.id = v.id
            RETURNING 1
        )
        SELECT count(*) INTO v_n FROM del;
    END IF;
    RETURN QUERY SELECT v_n, coalesce(v_last, p_after),
                        v_seen = p_batch AND (v_n > 0 OR v_newest < p_before);
END;
$$;
