-- Part of mailroom_dequeue_due, for group p_group_id (whose row lock the caller holds) and the
-- jobs p_ids it has just leased again (their rows locked by this transaction): finishes those
-- that must not be sent any more, with the state and the reason: failed after
-- p_max_lost_leases leases ran out without an outcome, cancelled (token deleted, consumed, or
-- its account's status is no longer p_needed[array_position(p_names, action)]), superseded,
-- rate_limited, expired, suppressed (the address is on the suppression list). Read by one
-- probe per job and table, then written by ctid, one statement per finished job (few: most
-- jobs due again are sent again).
-- Called by mailroom_dequeue only: its statements are planned under that function's settings.
CREATE OR REPLACE FUNCTION mailroom.mailroom_dequeue_finish(p_group_id integer, p_max_lost_leases integer, p_ids bigint[], p_names text[], p_needed mailroom.account_status[]) RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
DECLARE
    v_now    BIGINT := EXTRACT(EPOCH FROM now())::BIGINT;
    v_tids   TID[];
    v_states delivery_state[];
    v_whys   TEXT[];
BEGIN
    SELECT array_agg(x.ctid), array_agg(x.st), array_agg(x.why)
      INTO v_tids, v_states, v_whys
      FROM (SELECT d2.ctid,
                   CASE WHEN d2.lost_leases >= p_max_lost_leases THEN 'failed'
                        WHEN t.id IS NULL THEN 'cancelled'
                        WHEN t.superseded_by IS NOT NULL THEN 'superseded'
                        WHEN t.rate_limited THEN 'rate_limited'
                        WHEN t.expires_at <= v_now THEN 'expired'
                        WHEN NOT mailroom_token_sendable(ROW(t.*)::tokens, a.status, v_now,
                                                     p_needed[array_position(p_names, t.action)])
                             THEN 'cancelled'
                        WHEN sp.address IS NOT NULL THEN 'suppressed'
                   END::delivery_state AS st,
                   CASE WHEN d2.lost_leases >= p_max_lost_leases
                             THEN format('lease ran out %s times without an outcome',
                                         d2.lost_leases)
                        WHEN t.id IS NULL THEN 'token deleted'
                        WHEN t.superseded_by IS NOT NULL OR t.rate_limited
                             THEN t.suppressed_reason
                        WHEN t.expires_at <= v_now THEN 'token expired before delivery'
                        WHEN NOT mailroom_token_sendable(ROW(t.*)::tokens, a.status, v_now,
                                                     p_needed[array_position(p_names, t.action)])
                             THEN 'token consumed or account status changed'
                        ELSE sp.why
                   END AS why
              FROM unnest(p_ids) AS u(id)
             CROSS JOIN LATERAL (SELECT d2.ctid, d2.token_id, d2.lost_leases
                                   FROM deliveries d2
                                  WHERE d2.group_id = p_group_id AND d2.token_id = u.id
                                 OFFSET 0) d2
              LEFT JOIN LATERAL (SELECT t.* FROM tokens t WHERE t.id = d2.token_id
                                 OFFSET 0) t ON true
              LEFT JOIN LATERAL (SELECT a.status, coalesce(t.to_address, a.email) AS email
                                   FROM accounts a
                                  WHERE a.id = t.account OFFSET 0) a ON true
              LEFT JOIN LATERAL (SELECT * FROM mailroom_suppression(a.email) OFFSET 0) sp
                     ON true) x
     WHERE x.st IS NOT NULL;
    FOR i IN 1 .. coalesce(array_length(v_tids, 1), 0) LOOP
        UPDATE deliveries d
           SET state = v_states[i], reason = v_whys[i], owner = NULL, due_at = NULL,
               updated_at = now()
         WHERE d.ctid = v_tids[i];
    END LOOP;
END;
$$;
