-- The first part of mailroom_collect_signups: takes up to p_limit queued signups
-- (mailroom_signups), deletes them and returns their accounts and request times. The queue is
-- read in its physical order, each row's account locked (SKIP LOCKED) with the existing
-- counter row of its address (mailroom_address_requests): a row whose account, or whose
-- address's counter row, another transaction holds is passed over, and the scan goes on until
-- p_limit rows are taken or the queue ends. One statement: the LIMIT stops the scan (and the
-- locking) at the p_limit-th row taken, so a call reads the rows it takes and the held ones
-- before them, not the whole queue. NULLs when nothing was taken.
-- Called by mailroom_collect_signups only: its statements are planned under that function's
-- settings.
CREATE OR REPLACE FUNCTION mailroom.mailroom_collect_take(p_limit integer, OUT o_accounts bigint[], OUT o_ats bigint[])
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
DECLARE
    v_tids TID[];
BEGIN
    SELECT array_agg(x.ctid) INTO v_tids
      FROM (SELECT q.ctid
              FROM mailroom_signups q
              LEFT JOIN LATERAL (SELECT a.id, mailroom_limit_address(a.email) AS address
                                   FROM accounts a
                                  WHERE a.id = q.account
                                    FOR NO KEY UPDATE SKIP LOCKED) l ON true
              LEFT JOIN LATERAL (SELECT true AS held FROM accounts a
                                  WHERE l.id IS NULL AND a.id = q.account LIMIT 1) e ON true
              LEFT JOIN LATERAL (SELECT r.address FROM mailroom_address_requests r
                                  WHERE r.address = l.address AND r.action = 'activation'
                                    FOR UPDATE SKIP LOCKED) k ON true
              LEFT JOIN LATERAL (SELECT true AS held FROM mailroom_address_requests r
                                  WHERE k.address IS NULL AND r.address = l.address
                                    AND r.action = 'activation' LIMIT 1) c ON true
             WHERE e.held IS NULL AND c.held IS NULL
             LIMIT p_limit) x;
    IF v_tids IS NULL THEN
        RETURN;
    END IF;
    WITH d AS (
        DELETE FROM mailroom_signups q
         WHERE q.ctid = ANY (v_tids)
        RETURNING q.account, q.requested_at
    )
    SELECT array_agg(d.account), array_agg(d.requested_at) INTO o_accounts, o_ats FROM d;
END;
$$;
