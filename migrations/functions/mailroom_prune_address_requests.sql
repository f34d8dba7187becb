-- Deletes, in the table's blocks [p_after, p_after + p_batch / 32 + 1), the rows whose newest
-- request is older than the window: they can no longer limit anything. Called by the retention
-- pass. Returns the rows deleted, the next block and whether blocks remain.
CREATE OR REPLACE FUNCTION mailroom.mailroom_prune_address_requests(p_after BIGINT, p_batch INT)
    RETURNS TABLE (deleted BIGINT, next_after BIGINT, more BOOLEAN)
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
DECLARE
    v_since BIGINT := EXTRACT(EPOCH FROM now())::BIGINT
                      - (SELECT limit_window_seconds FROM mailroom_settings);
    v_next  BIGINT := p_after + p_batch / 32 + 1;
BEGIN
    DELETE FROM mailroom_address_requests r
     WHERE r.ctid >= format('(%s,0)', p_after)::TID AND r.ctid < format('(%s,0)', v_next)::TID
       AND (SELECT max(x) FROM unnest(r.times) x) <= v_since;
    GET DIAGNOSTICS deleted = ROW_COUNT;
    next_after := v_next;
    more := v_next < pg_relation_size('mailroom_address_requests')
                     / current_setting('block_size')::BIGINT;
    RETURN NEXT;
END;
$$;
