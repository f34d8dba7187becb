-- Back to 0009: one cursor for both actions again. The two cursors may stand at different
-- points, so the single cursor restarts at the lower of their xmins, as a snapshot that sees
-- every transaction below it and none above: tokens above it are read again, and the ones
-- that already have a delivery are skipped (ON CONFLICT DO NOTHING), so nothing is lost and
-- nothing is handed out twice.
UPDATE consumer_groups
   SET prev_snapshot = (m || ':' || m || ':')::PG_SNAPSHOT, cur_snapshot = NULL,
       pos_txid = NULL, pos_id = NULL
  FROM (SELECT id AS gid,
               least(pg_snapshot_xmin(prev_snapshot),
                     pg_snapshot_xmin(coalesce(rec_prev_snapshot, prev_snapshot))) AS m
          FROM consumer_groups
         WHERE rec_prev_snapshot::TEXT IS DISTINCT FROM prev_snapshot::TEXT
            OR rec_cur_snapshot::TEXT IS DISTINCT FROM cur_snapshot::TEXT
            OR rec_pos_txid IS DISTINCT FROM pos_txid OR rec_pos_id IS DISTINCT FROM pos_id) x
 WHERE id = x.gid AND rec_prev_snapshot IS NOT NULL;

-- 0009's mailroom_dequeue, with 0007's planner settings.
CREATE OR REPLACE FUNCTION mailroom_dequeue(p_group TEXT, p_limit INT, p_owner TEXT, p_lease_ms INT)
    RETURNS TABLE (job_id BIGINT, action token_action, email TEXT, login TEXT, secret BYTEA,
                   code TEXT, expires_at BIGINT, account_id BIGINT, attempt INT, failures INT,
                   created_at BIGINT, locale TEXT)
    LANGUAGE plpgsql
    SET enable_seqscan = off SET enable_bitmapscan = off SET enable_sort = off
    AS $$
#variable_conflict use_column
DECLARE
    g          consumer_groups%ROWTYPE;
    v_due      TIMESTAMPTZ := now() + make_interval(secs => p_lease_ms / 1000.0);
    v_now      BIGINT := EXTRACT(EPOCH FROM now())::BIGINT;
    v_left     INT := p_limit;
    v_opened   BOOLEAN := FALSE;
    v_ids      BIGINT[];
    v_txids    XID8[];
    v_actions  token_action[];
    v_emails   TEXT[];
    v_logins   TEXT[];
    v_secrets  BYTEA[];
    v_codes    TEXT[];
    v_expires  BIGINT[];
    v_accounts BIGINT[];
    v_created  BIGINT[];
    v_locales  TEXT[];
    v_ok       BOOLEAN[];
    v_skip     TEXT[];
    v_reasons  TEXT[];
    v_count    INT;
    v_returned INT;
BEGIN
    SELECT * INTO g FROM consumer_groups WHERE name = p_group FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown consumer group "%"', p_group USING ERRCODE = 'no_data_found';
    END IF;

    -- 1. Jobs due again.
    WITH due AS (
        SELECT d.token_id FROM deliveries d
         WHERE d.group_id = g.id AND d.state IN ('leased', 'retry') AND d.due_at <= now()
         ORDER BY d.due_at LIMIT v_left
           FOR UPDATE SKIP LOCKED
    ), upd AS (
        UPDATE deliveries d
           SET lost_leases = d.lost_leases + (d.state = 'leased' AND NOT d.holder_left)::INT,
               attempts = d.attempts + 1, state = 'leased', owner = p_owner, due_at = v_due,
               holder_left = false, updated_at = now()
          FROM due
         WHERE d.group_id = g.id AND d.token_id = due.token_id
        RETURNING d.token_id
    )
    SELECT array_agg(token_id) INTO v_ids FROM upd;

    IF v_ids IS NOT NULL THEN
        -- Finish those that must not be sent any more.
        UPDATE deliveries d
           SET state = x.st, reason = x.why, owner = NULL, due_at = NULL, updated_at = now()
          FROM (SELECT d2.token_id,
                       CASE WHEN d2.lost_leases >= g.max_lost_leases THEN 'failed'
                            WHEN t.id IS NULL THEN 'cancelled'
                            WHEN t.superseded_by IS NOT NULL THEN 'superseded'
                            WHEN t.rate_limited THEN 'rate_limited'
                            WHEN t.expires_at <= v_now THEN 'expired'
                            WHEN NOT mailroom_token_sendable(t, a.status, v_now) THEN 'cancelled'
                            WHEN sp.address IS NOT NULL THEN 'suppressed'
                       END::delivery_state AS st,
                       CASE WHEN d2.lost_leases >= g.max_lost_leases
                                 THEN format('lease ran out %s times without an outcome',
                                             d2.lost_leases)
                            WHEN t.id IS NULL THEN 'token deleted'
                            WHEN t.superseded_by IS NOT NULL OR t.rate_limited
                                 THEN t.suppressed_reason
                            WHEN t.expires_at <= v_now THEN 'token expired before delivery'
                            WHEN NOT mailroom_token_sendable(t, a.status, v_now)
                                 THEN 'token consumed or account status changed'
                            ELSE sp.why
                       END AS why
                  FROM deliveries d2
                  LEFT JOIN tokens t ON t.id = d2.token_id
                  LEFT JOIN accounts a ON a.id = t.account
                  LEFT JOIN LATERAL mailroom_suppression(a.email) sp ON true
                 WHERE d2.group_id = g.id AND d2.token_id = ANY (v_ids)) x
         WHERE d.group_id = g.id AND d.token_id = x.token_id AND x.st IS NOT NULL;

        RETURN QUERY
        SELECT t.id, t.action, a.email::TEXT, a.login::TEXT, t.secret, t.code::TEXT,
               t.expires_at, t.account, d.attempts, d.failures, t.created_at, a.locale
          FROM deliveries d
          JOIN tokens t ON t.id = d.token_id
          JOIN accounts a ON a.id = t.account
         WHERE d.group_id = g.id AND d.token_id = ANY (v_ids) AND d.state = 'leased';
        GET DIAGNOSTICS v_returned = ROW_COUNT;
        v_left := v_left - v_returned;
    END IF;

    -- 2. New tokens, window by window.
    WHILE v_left > 0 LOOP
        IF g.cur_snapshot IS NULL THEN
            EXIT WHEN v_opened;  -- at most one fresh window per call
            g.cur_snapshot := pg_current_snapshot();
            g.pos_txid := pg_snapshot_xmin(g.prev_snapshot);
            g.pos_id := 0;
            v_opened := TRUE;
        END IF;

        -- One pass over the window (index range scan on (txid, id)) collects everything the
        -- jobs need; the lease rows are written from it without looking the tokens up again.
        SELECT array_agg(w.id), array_agg(w.txid), array_agg(w.action), array_agg(w.email),
               array_agg(w.login), array_agg(w.secret), array_agg(w.code),
               array_agg(w.expires_at), array_agg(w.account), array_agg(w.created_at),
               array_agg(w.ok), array_agg(w.skip), array_agg(w.locale),
               array_agg(w.suppressed_reason)
          INTO v_ids, v_txids, v_actions, v_emails, v_logins, v_secrets, v_codes, v_expires,
               v_accounts, v_created, v_ok, v_skip, v_locales, v_reasons
          FROM (SELECT t.id, t.txid, t.action, a.email::TEXT AS email, a.login::TEXT AS login,
                       t.secret, t.code::TEXT AS code, t.expires_at, t.account, t.created_at,
                       a.locale, s.ok,
                       CASE WHEN t.superseded_by IS NOT NULL OR t.rate_limited
                                 THEN t.suppressed_reason
                            ELSE sp.why END AS suppressed_reason,
                       CASE WHEN s.ok THEN NULL
                            WHEN t.superseded_by IS NOT NULL THEN 'superseded'
                            WHEN t.rate_limited THEN 'rate_limited'
                            WHEN t.expires_at <= v_now THEN 'expired'
                            WHEN t.consumed_at IS NOT NULL THEN 'consumed'
                            WHEN NOT s.sendable THEN a.status::TEXT
                            ELSE 'suppressed' END AS skip
                  FROM tokens t JOIN accounts a ON a.id = t.account
                  LEFT JOIN LATERAL mailroom_suppression(a.email) sp ON true
                 CROSS JOIN LATERAL (SELECT mailroom_token_sendable(t, a.status, v_now)
                                            AS sendable) s0
                 CROSS JOIN LATERAL (SELECT s0.sendable AND t.superseded_by IS NULL
                                           AND NOT t.rate_limited AND sp.address IS NULL AS ok,
                                           s0.sendable) s
                 WHERE (t.txid, t.id) > (g.pos_txid, g.pos_id)
                   AND t.txid < pg_snapshot_xmax(g.cur_snapshot)
                   AND pg_visible_in_snapshot(t.txid, g.cur_snapshot)
                   AND NOT pg_visible_in_snapshot(t.txid, g.prev_snapshot)
                 ORDER BY t.txid, t.id
                 LIMIT v_left) w;
        v_count := coalesce(array_length(v_ids, 1), 0);

        IF v_count > 0 THEN
            RETURN QUERY
            WITH r AS (
                SELECT * FROM unnest(v_ids, v_actions, v_emails, v_logins, v_secrets, v_codes,
                                     v_expires, v_accounts, v_created, v_ok, v_locales)
                           AS r(id, action, email, login, secret, code, expires_at, account,
                                created_at, ok, locale)
                 WHERE r.ok
            ), ins AS (
                INSERT INTO deliveries (group_id, token_id, state, owner, due_at)
                SELECT g.id, r.id, 'leased', p_owner, v_due FROM r
                ON CONFLICT DO NOTHING
                RETURNING token_id
            )
            SELECT r.id, r.action, r.email, r.login, r.secret, r.code, r.expires_at, r.account,
                   1, 0, r.created_at, r.locale
              FROM r JOIN ins ON ins.token_id = r.id;
            GET DIAGNOSTICS v_returned = ROW_COUNT;

            -- Tokens not to send are recorded too, so that every token of the group ends with
            -- an outcome and a reason (seed 001's filters: expired, consumed, wrong status;
            -- the abuse limits decided when the token was inserted; the suppression list).
            IF FALSE = ANY (v_ok) THEN
                INSERT INTO deliveries (group_id, token_id, state, attempts, reason)
                SELECT g.id, x.id,
                       (CASE WHEN x.why IN ('expired', 'superseded', 'rate_limited', 'suppressed')
                                  THEN x.why
                             ELSE 'cancelled' END)::delivery_state,
                       0,
                       CASE x.why WHEN 'expired' THEN 'token expired before delivery'
                                  WHEN 'consumed' THEN 'token consumed before delivery'
                                  WHEN 'superseded' THEN x.reason
                                  WHEN 'rate_limited' THEN x.reason
                                  WHEN 'suppressed' THEN x.reason
                                  ELSE format('%s token for an account that is %s', x.action, x.why)
                       END
                  FROM unnest(v_ids, v_skip, v_actions, v_reasons) AS x(id, why, action, reason)
                 WHERE x.why IS NOT NULL
                ON CONFLICT DO NOTHING;
            END IF;
        ELSE
            v_returned := 0;
        END IF;

        IF v_count < v_left THEN
            -- Window exhausted: its upper snapshot becomes the lower bound.
            g.prev_snapshot := g.cur_snapshot;
            g.cur_snapshot := NULL;
            g.pos_txid := NULL;
            g.pos_id := NULL;
        ELSE
            g.pos_txid := v_txids[v_count];
            g.pos_id := v_ids[v_count];
        END IF;
        v_left := v_left - v_returned;
    END LOOP;

    UPDATE consumer_groups
       SET prev_snapshot = g.prev_snapshot, cur_snapshot = g.cur_snapshot,
           pos_txid = g.pos_txid, pos_id = g.pos_id
     WHERE id = g.id;
END;
$$;
-- 0009's mailroom_stats.
CREATE OR REPLACE FUNCTION mailroom_stats(p_group TEXT)
    RETURNS TABLE (group_name TEXT, depth BIGINT, lag_seconds DOUBLE PRECISION,
                   in_flight BIGINT, waiting_retry BIGINT, sent BIGINT, failed BIGINT,
                   expired BIGINT, cancelled BIGINT, superseded BIGINT, rate_limited BIGINT,
                   suppressed BIGINT)
    LANGUAGE sql STABLE AS $$
    SELECT g.name, w.depth,
           CASE WHEN w.depth = 0 THEN 0
                ELSE greatest(0, EXTRACT(EPOCH FROM now()) - w.oldest) END,
           d.in_flight, d.waiting_retry, d.sent, d.failed, d.expired, d.cancelled,
           d.superseded, d.rate_limited, d.suppressed
      FROM consumer_groups g
      CROSS JOIN LATERAL (
          SELECT count(*) AS depth, min(t.created_at) AS oldest
            FROM tokens t
           WHERE t.txid >= pg_snapshot_xmin(g.prev_snapshot)
             AND NOT pg_visible_in_snapshot(t.txid, g.prev_snapshot)
             AND (g.cur_snapshot IS NULL
                  OR NOT pg_visible_in_snapshot(t.txid, g.cur_snapshot)
                  OR (t.txid, t.id) > (g.pos_txid, g.pos_id))) w
      CROSS JOIN LATERAL (
          SELECT count(*) FILTER (WHERE x.state::TEXT = 'leased') AS in_flight,
                 count(*) FILTER (WHERE x.state::TEXT = 'retry') AS waiting_retry,
                 count(*) FILTER (WHERE x.state::TEXT = 'sent') AS sent,
                 count(*) FILTER (WHERE x.state::TEXT = 'failed') AS failed,
                 count(*) FILTER (WHERE x.state::TEXT = 'expired') AS expired,
                 count(*) FILTER (WHERE x.state::TEXT = 'cancelled') AS cancelled,
                 count(*) FILTER (WHERE x.state::TEXT = 'superseded') AS superseded,
                 count(*) FILTER (WHERE x.state::TEXT = 'rate_limited') AS rate_limited,
                 count(*) FILTER (WHERE x.state::TEXT = 'suppressed') AS suppressed
            FROM deliveries x WHERE x.group_id = g.id) d
     WHERE p_group IS NULL OR p_group = '' OR g.name = p_group
     ORDER BY g.name;
$$;

DROP INDEX deliveries_due_recovery_idx;
ALTER TABLE deliveries DROP COLUMN recovery;
DROP INDEX tokens_action_txid_id_idx;
ALTER TABLE consumer_groups
    DROP COLUMN rec_prev_snapshot,
    DROP COLUMN rec_cur_snapshot,
    DROP COLUMN rec_pos_txid,
    DROP COLUMN rec_pos_id;
