-- Deletes, among the next p_batch grants after id p_after, those that expired before p_before
-- and can no longer matter. Rows another transaction holds are skipped. Returns as
-- mailroom_prune_deliveries: how many were deleted, the last id examined (the next
-- call's p_after) and whether to go on (false at the end of the table or at a batch with
-- nothing to delete whose newest grant is newer than p_before: ids follow time).
--
-- A grant can no longer matter when it was refunded, fully returned, its holder has no linked
-- subscription, or its holder holds no grant newer than p_before and has nothing to give back.
-- The invariant: pruning never makes any holder's refund larger. For holder H the refund is
--     refund(H) = sum over H's grant rows of (emails - returned_emails)
--               - sum over H's subscription rows of greatest(handed - settled_unsent, 0).
-- Deleting a grant row removes a term emails - returned_emails >= 0 from the first sum and
-- nothing from the second: refund(H) goes down or stays (whatever a concurrent refund or return
-- does: the refund locks H's grants, the prune skips locked rows). Deleting a subscription row
-- would raise refund(H), so mailroom_prune_budget_subscriptions deletes one only when H has no
-- grant row left (refund(H) is then nothing) and its owner holds no lease. Folding
-- (mailroom_compact_budget_grants) keeps every sum, so refund(H) is exactly what it was.
CREATE OR REPLACE FUNCTION mailroom.mailroom_prune_budget_grants(p_after bigint, p_before timestamp with time zone, p_batch integer) RETURNS TABLE(pruned bigint, last_id bigint, more boolean)
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    SET enable_seqscan TO 'off'
    SET enable_bitmapscan TO 'off'
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
