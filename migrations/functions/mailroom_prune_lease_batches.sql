-- Deletes, among the next p_batch lease batches after p_after, the finished ones ('done' or
-- 'expired') last updated before p_before. Called by the retention pass. A finished batch's SENT
-- jobs go with it, as a pruned SENT row does (delivery_counts keeps counting them). Returns as
-- mailroom_prune_deliveries.
-- Its page images are compressed where the role may (mailroom_compress_page_images).
CREATE OR REPLACE FUNCTION mailroom.mailroom_prune_lease_batches(p_after bigint, p_before timestamp with time zone, p_batch integer) RETURNS TABLE(pruned bigint, last_id bigint, more boolean)
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
    SELECT array_agg(w.batch_id) FILTER (WHERE w.state <> 'leased' AND w.updated_at < p_before),
           count(*), max(w.batch_id), max(w.updated_at)
      INTO v_ids, v_seen, v_last, v_newest
      FROM (SELECT b.batch_id, b.state, b.updated_at FROM lease_batches b
             WHERE b.batch_id > p_after ORDER BY b.batch_id LIMIT p_batch) w;
    v_n := 0;
    IF v_ids IS NOT NULL THEN
        WITH victims AS (
            SELECT b.batch_id FROM lease_batches b
             WHERE b.batch_id = ANY (v_ids) AND b.state <> 'leased' AND b.updated_at < p_before
               FOR UPDATE SKIP LOCKED
        ), del AS (
            DELETE FROM lease_batches b USING victims v WHERE b.batch_id = v.batch_id
            RETURNING 1
        )
        SELECT count(*) INTO v_n FROM del;
    END IF;
    RETURN QUERY SELECT v_n, coalesce(v_last, p_after),
                        v_seen = p_batch AND (v_n > 0 OR v_newest < p_before);
END;
$$;
