-- Deletes, among the next p_batch tokens after id p_after, those no group needs any more: created
-- and expired before p_before_epoch and before the abuse limits' window, with no deliveries row
-- left and in no lease batch. Called by the retention pass, after the other tables. Rows another
-- transaction holds are skipped. Returns as mailroom_prune_deliveries; a pass costs O(tokens
-- older than the cut-off / batch) (docs/design.md, "Retention keeps every table bounded"): a
-- token's deliveries rows are probed by the whole key, (group, token), once per group (nested
-- loops only: a hash of every group's rows, or a lookup by the token alone, which the key
-- cannot find without reading all of it, would cost O(deliveries) per call).
-- Its page images are compressed where the role may (mailroom_compress_page_images).
CREATE OR REPLACE FUNCTION mailroom.mailroom_prune_tokens(p_after bigint, p_before_epoch bigint, p_batch integer) RETURNS TABLE(pruned bigint, last_id bigint, more boolean)
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    SET enable_seqscan TO 'off'
    SET enable_bitmapscan TO 'off'
    SET enable_hashjoin TO 'off'
    SET enable_mergejoin TO 'off'
    SET jit TO 'off'
    AS $$
DECLARE
    v_cutoff  BIGINT;
    v_ids     BIGINT[];
    v_seen    INT;
    v_last    BIGINT;
    v_newest  BIGINT;
    v_n       BIGINT;
    v_groups  INT[] := ARRAY(SELECT g.id FROM consumer_groups g);
BEGIN
    PERFORM mailroom_compress_page_images();
    SELECT least(p_before_epoch,
                 EXTRACT(EPOCH FROM now())::BIGINT - s.limit_window_seconds)
      INTO v_cutoff FROM mailroom_settings s;
    SELECT array_agg(w.id) FILTER (WHERE w.created_at < v_cutoff AND w.expires_at < v_cutoff),
           count(*), max(w.id), max(w.created_at)
      INTO v_ids, v_seen, v_last, v_newest
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
               -- One probe per group by the whole key (the LIMIT keeps it a probe).
               AND NOT EXISTS (SELECT 1 FROM unnest(v_groups) AS g(id)
                                CROSS JOIN LATERAL (SELECT 1 FROM deliveries d
                                                     WHERE d.group_id = g.id
                                                       AND d.token_id = t.id LIMIT 1) d)
               FOR UPDATE OF t SKIP LOCKED
        ), del AS (
            DELETE FROM tokens t USING victims v WHERE t.id = v.id
            RETURNING 1
        )
        SELECT count(*) INTO v_n FROM del;
    END IF;
    -- Go on while a window deletes something or is older than the cut-off throughout (what it
    -- kept is kept for a lease or a delivery row; newer tokens may still go).
    RETURN QUERY SELECT v_n, coalesce(v_last, p_after),
                        v_seen = p_batch AND (v_n > 0 OR v_newest < v_cutoff);
END;
$$;
