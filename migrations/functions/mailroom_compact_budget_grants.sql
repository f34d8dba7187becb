-- Folds, among the next p_batch grants after id p_after, the unrefunded grants that expired
-- before p_before into one row per (group, holder, month, price, class). Called by the retention
-- pass. Keeps every sum a refund reads; rows another transaction holds are skipped. Returns how
-- many rows were folded away, the last id examined and whether to go on.

CREATE OR REPLACE FUNCTION mailroom.mailroom_compact_budget_grants(p_after bigint, p_before timestamp with time zone, p_batch integer) RETURNS TABLE(pruned bigint, last_id bigint, more boolean)
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    SET enable_seqscan TO 'off'
    SET enable_bitmapscan TO 'off'
    SET jit TO 'off'
    AS $$
DECLARE
    k        RECORD;
    v_seen   INT;
    v_last   BIGINT;
    v_newest TIMESTAMPTZ;
    v_n      BIGINT := 0;
BEGIN
    SELECT count(*), max(w.id), max(w.expires_at)
      INTO v_seen, v_last, v_newest
      FROM (SELECT g.id, g.expires_at FROM budget_grants g
             WHERE g.id > p_after ORDER BY g.id LIMIT p_batch) w;
    FOR k IN
        WITH locked AS (
            SELECT g.id, g.group_id, g.holder, g.month, g.price_micros, g.recovery, g.emails,
                   g.returned_emails, g.created_at, g.expires_at
              FROM budget_grants g
             WHERE g.id > p_after AND g.id <= coalesce(v_last, p_after)
               AND NOT g.refunded AND g.expires_at < p_before
               FOR UPDATE SKIP LOCKED
        )
        SELECT max(l.id) AS keep, array_agg(l.id) AS ids, sum(l.emails) AS emails,
               sum(l.returned_emails) AS returned, min(l.created_at) AS created,
               max(l.expires_at) AS expires
          FROM locked l
         GROUP BY l.group_id, l.holder, l.month, l.price_micros, l.recovery
        HAVING count(*) > 1 AND sum(l.emails) <= 2147483647
    LOOP
        DELETE FROM budget_grants g WHERE g.id = ANY (k.ids) AND g.id <> k.keep;
        UPDATE budget_grants g
           SET emails = k.emails, returned_emails = k.returned, created_at = k.created,
               expires_at = k.expires
         WHERE g.id = k.keep;
        v_n := v_n + cardinality(k.ids) - 1;
    END LOOP;
    RETURN QUERY SELECT v_n, coalesce(v_last, p_after),
                        v_seen = p_batch AND (v_n > 0 OR v_newest < p_before);
END;
$$;
