-- Back to the schema before 0024: no expiry of leases in the retention pass, token pruning as
-- 0021 left it, no recovery-first check for grants.
DROP FUNCTION mailroom_budget_recovery_first(TEXT, BIGINT, INT, BIGINT, INT);
DROP FUNCTION mailroom_expire_leases(INT, BIGINT, INT);
DROP INDEX lease_batches_recovery_idx;

-- 0013's token pruning; a token in a lease batch is kept until the batch is pruned.
CREATE OR REPLACE FUNCTION mailroom_prune_tokens(p_after BIGINT, p_before_epoch BIGINT, p_batch INT)
    RETURNS TABLE (pruned BIGINT, last_id BIGINT, more BOOLEAN)
    LANGUAGE plpgsql
    SET enable_seqscan = off SET enable_bitmapscan = off
    AS $$
DECLARE
    v_cutoff  BIGINT;
    v_ids     BIGINT[];
    v_seen    INT;
    v_last    BIGINT;
    v_n       BIGINT;
BEGIN
    SELECT least(p_before_epoch,
                 EXTRACT(EPOCH FROM now())::BIGINT - s.limit_window_seconds)
      INTO v_cutoff FROM mailroom_settings s;
    SELECT array_agg(w.id) FILTER (WHERE w.created_at < v_cutoff AND w.expires_at < v_cutoff),
           count(*), max(w.id)
      INTO v_ids, v_seen, v_last
      FROM (SELECT t.id, t.created_at, t.expires_at FROM tokens t
             WHERE t.id > p_after ORDER BY t.id LIMIT p_batch) w;
    v_n := 0;
    IF v_ids IS NOT NULL THEN
        WITH victims AS (
            SELECT t.id FROM tokens t
             WHERE t.id = ANY (v_ids)
               AND t.created_at < v_cutoff AND t.expires_at < v_cutoff
               -- A token outlives its batch as it outlives its deliveries rows.
               AND NOT EXISTS (SELECT 1 FROM lease_batches b
                                WHERE int8range(b.lo_id, b.hi_id, '[]') @> t.id
                                  AND t.id = ANY (b.ids))
               AND NOT EXISTS (SELECT 1 FROM consumer_groups g
                                 JOIN deliveries d ON d.group_id = g.id AND d.token_id = t.id)
               FOR UPDATE OF t SKIP LOCKED
        ), del AS (
            DELETE FROM tokens t USING victims v WHERE t.id = v.id
            RETURNING 1
        )
        SELECT count(*) INTO v_n FROM del;
    END IF;
    -- Go on while a window deletes something. Walking on through tokens kept for their
    -- deliveries would make a pass O(tokens) whenever deliveries lag behind.
    RETURN QUERY SELECT v_n, coalesce(v_last, p_after), v_seen = p_batch AND v_n > 0;
END;
$$;
