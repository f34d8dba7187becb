-- Deletes the finished deliveries of group p_group_id updated before p_before among the next
-- p_batch rows after token p_after. Called by the retention pass; rows another transaction holds
-- are skipped (left for a later pass). Returns how many were deleted, the last token id examined
-- (the next call's p_after) and whether to go on: false at the end of the group's rows or at a
-- batch with nothing to delete whose newest row is newer than p_before (token order follows
-- time).
-- Its page images are compressed where the role may (mailroom_compress_page_images).
CREATE OR REPLACE FUNCTION mailroom.mailroom_prune_deliveries(p_group_id integer, p_after bigint, p_before timestamp with time zone, p_batch integer) RETURNS TABLE(pruned bigint, last_id bigint, more boolean)
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
    PERFORM mailroom_compress_page_images();
    SELECT array_agg(w.token_id) FILTER (WHERE mailroom_finished_state(w.state)
                                           AND w.updated_at < p_before),
           count(*), max(w.token_id), max(w.updated_at)
      INTO v_ids, v_seen, v_last, v_newest
      FROM (SELECT d.token_id, d.state, d.updated_at FROM deliveries d
             WHERE d.group_id = p_group_id AND d.token_id > p_after
             ORDER BY d.token_id LIMIT p_batch) w;
    v_n := 0;
    IF v_ids IS NOT NULL THEN
        WITH victims AS (
            SELECT d.token_id FROM deliveries d
             WHERE d.group_id = p_group_id AND d.token_id = ANY (v_ids)
               AND mailroom_finished_state(d.state) AND d.updated_at < p_before
               FOR UPDATE SKIP LOCKED
        ), del AS (
            DELETE FROM deliveries d USING victims v
             WHERE d.group_id = p_group_id AND d.token_id = v.token_id
            RETURNING 1
        )
        SELECT count(*) INTO v_n FROM del;
    END IF;
    RETURN QUERY SELECT v_n, coalesce(v_last, p_after),
                        v_seen = p_batch AND (v_n > 0 OR v_newest < p_before);
END;
$$;
