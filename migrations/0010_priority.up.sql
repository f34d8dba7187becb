-- Password recoveries first across the whole backlog of a group (issue 11 §2).
--
-- Until 0009 mailroom_dequeue handed out jobs in commit order only: a recovery queued behind a
-- budget-paced backlog of thousands of activations waited its turn in PostgreSQL (and could
-- expire there); the sender's own priority only ordered the few jobs it already held.
--
-- Design, and why it stays O(batch):
-- * One snapshot cursor per action. PgQ's window proof (see 0002) holds for any subset of the
--   tokens defined by a column that never changes, so each action gets its own pair of
--   snapshots and position: consumer_groups' existing columns become the activations' cursor,
--   rec_prev_snapshot/rec_cur_snapshot/rec_pos_txid/rec_pos_id the recoveries'. Each window is
--   an index range scan on tokens (action, txid, id) from its position, LIMIT what is left of
--   the batch. Every call drains the recoveries' cursor first; when no recovery waits, that
--   costs one index probe (and one snapshot) per call, whatever the backlog of activations.
-- * Jobs due again (leased past their lease, retries) are taken recovery-first too:
--   deliveries.recovery (the token's action, copied when the delivery is created) defines a
--   small partial index of the recoveries in flight, (group_id, due_at), read first; the
--   activations' due jobs come from 0002's deliveries_due_idx, which the recovery pass has
--   already emptied of due recoveries (it takes them all unless the batch is full, and then
--   no activation is read). Both are index range scans ordered by due_at (no sort, nothing
--   read that is not due). The recoveries' statement names `recovery` literally, so that the
--   partial index is provably usable in plpgsql's generic plans too. deliveries_due_idx and
--   deliveries_owner_idx are left as they were: an index (group_id, recovery, due_at) in
--   their place made mailroom_ack, on a table without statistics, read all of a group's
--   leases through it instead of the subscriber's own.
-- * Order of one call: recoveries due again, new recoveries, activations due again, new
--   activations. Due-again before new within a class, as before.
-- * A new group (mailroom_ensure_group, unchanged) has no recoveries' cursor yet
--   (rec_prev_snapshot NULL): the first dequeue copies the activations' cursor, which has not
--   moved on its own before that. Existing groups get the copy here, mid-window included
--   (both cursors then go on from the same position, each for its own action).
-- * Unchanged: the fencing (owner + attempt), the skips recorded as outcomes (expired,
--   consumed, wrong status, superseded, rate limited, suppressed, lost leases) with their
--   reasons, at most one fresh window per cursor per call, and the planner settings that keep
--   the plan an index range scan without statistics (0007: CREATE OR REPLACE resets them, so
--   they are stated again below).
-- * In-flight room: when a sender's max_in_flight is full of paced activations, each outcome
--   it reports frees room and the collector dequeues right away for a starved group (the
--   acknowledgement kicks the dispatcher); with this order the freed room goes to a waiting
--   recovery, which the sender then sends before everything it holds. A recovery therefore
--   waits about one send at the current pace for the room, not the whole backlog.
-- * mailroom_stats counts the depth per cursor (a recovery handed out ahead of the
--   activations' cursor is not counted as waiting).

ALTER TABLE consumer_groups
    ADD COLUMN rec_prev_snapshot PG_SNAPSHOT,
    ADD COLUMN rec_cur_snapshot  PG_SNAPSHOT,
    ADD COLUMN rec_pos_txid      XID8,
    ADD COLUMN rec_pos_id        BIGINT;
UPDATE consumer_groups
   SET rec_prev_snapshot = prev_snapshot, rec_cur_snapshot = cur_snapshot,
       rec_pos_txid = pos_txid, rec_pos_id = pos_id;

CREATE INDEX tokens_action_txid_id_idx ON tokens (action, txid, id);

ALTER TABLE deliveries ADD COLUMN recovery BOOLEAN NOT NULL DEFAULT false;
UPDATE deliveries d SET recovery = true
  FROM tokens t WHERE t.id = d.token_id AND t.action = 'password_recovery';
CREATE INDEX deliveries_due_recovery_idx ON deliveries (group_id, due_at)
    WHERE state IN ('leased', 'retry') AND recovery;

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
    v_class    token_action;
    v_rec      BOOLEAN;
    v_prev     PG_SNAPSHOT;
    v_cur      PG_SNAPSHOT;
    v_pos_txid XID8;
    v_pos_id   BIGINT;
    v_opened   BOOLEAN;
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
    IF g.rec_prev_snapshot IS NULL THEN
        -- A group created since 0010: the recoveries' cursor starts where the activations' is.
        g.rec_prev_snapshot := g.prev_snapshot;
        g.rec_cur_snapshot := g.cur_snapshot;
        g.rec_pos_txid := g.pos_txid;
        g.rec_pos_id := g.pos_id;
    END IF;

    FOREACH v_class IN ARRAY ARRAY['password_recovery', 'activation']::token_action[] LOOP
        EXIT WHEN v_left <= 0;
        v_rec := v_class = 'password_recovery';

        -- 1. Jobs of this class due again (locked here, leased again below).
        IF v_rec THEN
            SELECT array_agg(x.token_id) INTO v_ids
              FROM (SELECT d.token_id FROM deliveries d
                     WHERE d.group_id = g.id AND d.state IN ('leased', 'retry') AND d.recovery
                       AND d.due_at <= now()
                     ORDER BY d.due_at LIMIT v_left
                       FOR UPDATE SKIP LOCKED) x;
        ELSE
            SELECT array_agg(x.token_id) INTO v_ids
              FROM (SELECT d.token_id FROM deliveries d
                     WHERE d.group_id = g.id AND d.state IN ('leased', 'retry') AND NOT d.recovery
                       AND d.due_at <= now()
                     ORDER BY d.due_at LIMIT v_left
                       FOR UPDATE SKIP LOCKED) x;
        END IF;
        IF v_ids IS NOT NULL THEN
            WITH upd AS (
                UPDATE deliveries d
                   SET lost_leases = d.lost_leases + (d.state = 'leased' AND NOT d.holder_left)::INT,
                       attempts = d.attempts + 1, state = 'leased', owner = p_owner,
                       due_at = v_due, holder_left = false, updated_at = now()
                 WHERE d.group_id = g.id AND d.token_id = ANY (v_ids)
                RETURNING d.token_id
            )
            SELECT array_agg(token_id) INTO v_ids FROM upd;
        END IF;

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

        -- 2. New tokens of this class, window by window, on this class's cursor.
        IF v_rec THEN
            v_prev := g.rec_prev_snapshot; v_cur := g.rec_cur_snapshot;
            v_pos_txid := g.rec_pos_txid; v_pos_id := g.rec_pos_id;
        ELSE
            v_prev := g.prev_snapshot; v_cur := g.cur_snapshot;
            v_pos_txid := g.pos_txid; v_pos_id := g.pos_id;
        END IF;
        v_opened := FALSE;
        WHILE v_left > 0 LOOP
            IF v_cur IS NULL THEN
                EXIT WHEN v_opened;  -- at most one fresh window per cursor and call
                v_cur := pg_current_snapshot();
                v_pos_txid := pg_snapshot_xmin(v_prev);
                v_pos_id := 0;
                v_opened := TRUE;
            END IF;

            -- One pass over the window (index range scan on (action, txid, id)) collects
            -- everything the jobs need; the lease rows are written from it without looking the
            -- tokens up again.
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
                     WHERE t.action = v_class
                       AND (t.txid, t.id) > (v_pos_txid, v_pos_id)
                       AND t.txid < pg_snapshot_xmax(v_cur)
                       AND pg_visible_in_snapshot(t.txid, v_cur)
                       AND NOT pg_visible_in_snapshot(t.txid, v_prev)
                     ORDER BY t.action, t.txid, t.id
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
                    INSERT INTO deliveries (group_id, token_id, state, owner, due_at, recovery)
                    SELECT g.id, r.id, 'leased', p_owner, v_due, v_rec FROM r
                    ON CONFLICT DO NOTHING
                    RETURNING token_id
                )
                SELECT r.id, r.action, r.email, r.login, r.secret, r.code, r.expires_at,
                       r.account, 1, 0, r.created_at, r.locale
                  FROM r JOIN ins ON ins.token_id = r.id;
                GET DIAGNOSTICS v_returned = ROW_COUNT;

                -- Tokens not to send are recorded too, so that every token of the group ends
                -- with an outcome and a reason (seed 001's filters: expired, consumed, wrong
                -- status; the abuse limits decided when the token was inserted; the
                -- suppression list).
                IF FALSE = ANY (v_ok) THEN
                    INSERT INTO deliveries (group_id, token_id, state, attempts, reason, recovery)
                    SELECT g.id, x.id,
                           (CASE WHEN x.why IN ('expired', 'superseded', 'rate_limited',
                                                'suppressed')
                                      THEN x.why
                                 ELSE 'cancelled' END)::delivery_state,
                           0,
                           CASE x.why WHEN 'expired' THEN 'token expired before delivery'
                                      WHEN 'consumed' THEN 'token consumed before delivery'
                                      WHEN 'superseded' THEN x.reason
                                      WHEN 'rate_limited' THEN x.reason
                                      WHEN 'suppressed' THEN x.reason
                                      ELSE format('%s token for an account that is %s',
                                                  x.action, x.why)
                           END,
                           v_rec
                      FROM unnest(v_ids, v_skip, v_actions, v_reasons) AS x(id, why, action, reason)
                     WHERE x.why IS NOT NULL
                    ON CONFLICT DO NOTHING;
                END IF;
            ELSE
                v_returned := 0;
            END IF;

            IF v_count < v_left THEN
                -- Window exhausted: its upper snapshot becomes the lower bound.
                v_prev := v_cur;
                v_cur := NULL;
                v_pos_txid := NULL;
                v_pos_id := NULL;
            ELSE
                v_pos_txid := v_txids[v_count];
                v_pos_id := v_ids[v_count];
            END IF;
            v_left := v_left - v_returned;
        END LOOP;

        IF v_rec THEN
            g.rec_prev_snapshot := v_prev; g.rec_cur_snapshot := v_cur;
            g.rec_pos_txid := v_pos_txid; g.rec_pos_id := v_pos_id;
        ELSE
            g.prev_snapshot := v_prev; g.cur_snapshot := v_cur;
            g.pos_txid := v_pos_txid; g.pos_id := v_pos_id;
        END IF;
    END LOOP;

    UPDATE consumer_groups
       SET prev_snapshot = g.prev_snapshot, cur_snapshot = g.cur_snapshot,
           pos_txid = g.pos_txid, pos_id = g.pos_id,
           rec_prev_snapshot = g.rec_prev_snapshot, rec_cur_snapshot = g.rec_cur_snapshot,
           rec_pos_txid = g.rec_pos_txid, rec_pos_id = g.rec_pos_id
     WHERE id = g.id;
END;
$$;

-- 0009's mailroom_stats with the depth counted per cursor: activations after the
-- activations' cursor, recoveries after the recoveries' cursor (the activations' one for a
-- group that has not dequeued since it was created).
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
          SELECT sum(c.depth)::BIGINT AS depth, min(c.oldest) AS oldest
            FROM (VALUES ('activation'::token_action, g.prev_snapshot, g.cur_snapshot,
                          g.pos_txid, g.pos_id),
                         ('password_recovery'::token_action,
                          coalesce(g.rec_prev_snapshot, g.prev_snapshot),
                          CASE WHEN g.rec_prev_snapshot IS NULL THEN g.cur_snapshot
                               ELSE g.rec_cur_snapshot END,
                          CASE WHEN g.rec_prev_snapshot IS NULL THEN g.pos_txid
                               ELSE g.rec_pos_txid END,
                          CASE WHEN g.rec_prev_snapshot IS NULL THEN g.pos_id
                               ELSE g.rec_pos_id END))
                 AS k(action, prev, cur, pos_txid, pos_id)
           CROSS JOIN LATERAL (
               SELECT count(*) AS depth, min(t.created_at) AS oldest
                 FROM tokens t
                WHERE t.action = k.action
                  AND t.txid >= pg_snapshot_xmin(k.prev)
                  AND NOT pg_visible_in_snapshot(t.txid, k.prev)
                  AND (k.cur IS NULL
                       OR NOT pg_visible_in_snapshot(t.txid, k.cur)
                       OR (t.txid, t.id) > (k.pos_txid, k.pos_id))) c) w
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
