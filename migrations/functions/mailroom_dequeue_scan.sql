-- The pass of mailroom_dequeue_new over one stretch of a class's window: up to p_limit tokens
-- of class p_class after the cursor (p_pos_txid, p_pos_id) and before txid p_hi whose
-- transactions the upper snapshot p_cur sees and the lower one p_prev does not, in the order
-- (txid, id): an index range scan on tokens_priority_txid_id_idx with one probe per token of
-- accounts and the suppression list. Each token comes with everything its job needs, and with
-- skip NULL (to hand out) or why not, and the reason to record: superseded or rate_limited
-- (the limits' reason written at its insert), expired, consumed, the account's status where
-- it is not p_needed[array_position(p_names, action)], suppressed (the list's reason). Reads
-- only; its caller writes.
-- Called by mailroom_dequeue only: its statements are planned under that function's settings.
CREATE OR REPLACE FUNCTION mailroom.mailroom_dequeue_scan(p_class mailroom.action_priority, p_pos_txid xid8, p_pos_id bigint, p_hi xid8, p_prev pg_snapshot, p_cur pg_snapshot, p_limit integer, p_names text[], p_needed mailroom.account_status[]) RETURNS SETOF mailroom.dequeue_token
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
DECLARE
    v_now BIGINT := EXTRACT(EPOCH FROM now())::BIGINT;
BEGIN
    RETURN QUERY
    SELECT w.id, w.txid, w.action, w.email, w.login, w.secret, w.code, w.expires_at, w.account,
           w.created_at, w.locale, w.skip,
           CASE w.skip WHEN 'expired' THEN 'token expired before delivery'
                       WHEN 'consumed' THEN 'token consumed before delivery'
                       WHEN 'superseded' THEN w.reason
                       WHEN 'rate_limited' THEN w.reason
                       WHEN 'suppressed' THEN w.reason
                       ELSE format('%s token for an account that is %s', w.action, w.skip)
           END
      FROM (SELECT t.id, t.txid, t.action, coalesce(t.to_address, a.email::TEXT) AS email,
                   a.login::TEXT AS login, t.secret, t.code::TEXT AS code, t.expires_at,
                   t.account, t.created_at, a.locale,
                   CASE WHEN t.superseded_by IS NOT NULL OR t.rate_limited
                             THEN t.suppressed_reason
                        ELSE sp.why END AS reason,
                   CASE WHEN s.ok THEN NULL
                        WHEN t.superseded_by IS NOT NULL THEN 'superseded'
                        WHEN t.rate_limited THEN 'rate_limited'
                        WHEN t.expires_at <= v_now THEN 'expired'
                        WHEN t.consumed_at IS NOT NULL THEN 'consumed'
                        WHEN NOT s.sendable THEN a.status::TEXT
                        ELSE 'suppressed' END AS skip
              FROM tokens t
             CROSS JOIN LATERAL (SELECT a.email, a.login, a.locale, a.status
                                   FROM accounts a WHERE a.id = t.account OFFSET 0) a
              LEFT JOIN LATERAL (SELECT * FROM mailroom_suppression(
                                            coalesce(t.to_address, a.email)) OFFSET 0) sp
                     ON true
             CROSS JOIN LATERAL (SELECT mailroom_token_sendable(t, a.status, v_now,
                                          p_needed[array_position(p_names, t.action)])
                                        AS sendable) s0
             CROSS JOIN LATERAL (SELECT s0.sendable AND t.superseded_by IS NULL
                                       AND NOT t.rate_limited AND sp.address IS NULL AS ok,
                                       s0.sendable) s
             -- The class and the cursor as the range's two ends: t.priority = p_class,
             -- (t.txid, t.id) > the cursor, t.txid < p_hi.
             WHERE (t.priority, t.txid, t.id) > (p_class, p_pos_txid, p_pos_id)
               AND (t.priority, t.txid) < (p_class, p_hi)
               AND pg_visible_in_snapshot(t.txid, p_cur)
               AND NOT pg_visible_in_snapshot(t.txid, p_prev)
             ORDER BY t.priority, t.txid, t.id
             LIMIT p_limit) w;
END;
$$;
