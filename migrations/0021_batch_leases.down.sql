-- Back to 0020: every batch job gets its deliveries row first (SENT for a set bit, still leased
-- under the batch's lease otherwise), the SENT ones taken back out of delivery_counts (the
-- insert trigger counts them again), then the functions as 0020 left them.
WITH j AS (
    SELECT b.group_id, u.id, get_bit(b.done, u.slot::INT - 1) AS bit, b.state, b.owner, b.due_at,
           b.holder_left, b.recovery, b.updated_at
      FROM lease_batches b
     CROSS JOIN LATERAL unnest(b.ids) WITH ORDINALITY AS u(id, slot)
), ins AS (
    INSERT INTO deliveries (group_id, token_id, state, attempts, owner, due_at, holder_left,
                            recovery, updated_at)
    SELECT j.group_id, j.id, CASE WHEN j.bit = 1 THEN 'sent' ELSE 'leased' END::delivery_state, 1,
           CASE WHEN j.bit = 0 THEN j.owner END, CASE WHEN j.bit = 0 THEN j.due_at END,
           j.holder_left AND j.bit = 0, j.recovery, j.updated_at
      FROM j
     WHERE j.bit = 1 OR j.state = 'leased'
    ON CONFLICT DO NOTHING
    RETURNING group_id, state
)
INSERT INTO delivery_counts (group_id, state, n)
SELECT ins.group_id, 'sent', -count(*) FROM ins WHERE ins.state = 'sent' GROUP BY ins.group_id;

DROP VIEW delivery_states;
DROP FUNCTION mailroom_prune_lease_batches(BIGINT, TIMESTAMPTZ, INT);
DROP FUNCTION mailroom_release(TEXT, TEXT, BIGINT[]);
DROP FUNCTION mailroom_ack(TEXT, TEXT, BIGINT[], INT[], TEXT[], TEXT[], INT[], BIGINT[], TEXT[]);

CREATE FUNCTION mailroom_ack(p_group TEXT, p_owner TEXT, p_ids BIGINT[],
                                        p_attempts INT[], p_outcomes TEXT[], p_reasons TEXT[],
                                        p_retry_ms INT[], p_costs BIGINT[])
    RETURNS SETOF BIGINT
    LANGUAGE plpgsql
    SET enable_seqscan = off SET enable_bitmapscan = off
    AS $$
DECLARE
    gid    INT;
    v_ids  BIGINT[];
    v_att  INT[];
    v_out  TEXT[];
    v_rsn  TEXT[];
    v_ms   INT[];
    v_cost BIGINT[];
    v_tids TID[];
    v_done BIGINT[];
BEGIN
    SELECT id INTO gid FROM consumer_groups WHERE name = p_group;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown consumer group "%"', p_group USING ERRCODE = 'no_data_found';
    END IF;
    -- One outcome per id, as 0003's DISTINCT ON.
    SELECT array_agg(u.id), array_agg(u.attempt), array_agg(u.outcome), array_agg(u.reason),
           array_agg(u.retry_ms), array_agg(u.cost)
      INTO v_ids, v_att, v_out, v_rsn, v_ms, v_cost
      FROM (SELECT DISTINCT ON (u.id) *
              FROM unnest(p_ids, p_attempts, p_outcomes, p_reasons, p_retry_ms, p_costs)
                       AS u(id, attempt, outcome, reason, retry_ms, cost)
             ORDER BY u.id) u;
    WHILE v_ids IS NOT NULL LOOP
        SELECT array_agg(d.ctid), array_agg(u.id), array_agg(u.attempt), array_agg(u.outcome),
               array_agg(u.reason), array_agg(u.retry_ms), array_agg(u.cost)
          INTO v_tids, v_ids, v_att, v_out, v_rsn, v_ms, v_cost
          FROM unnest(v_ids, v_att, v_out, v_rsn, v_ms, v_cost)
                   AS u(id, attempt, outcome, reason, retry_ms, cost)
         CROSS JOIN LATERAL (SELECT d.ctid, d.state, d.owner, d.attempts FROM deliveries d
                              WHERE d.group_id = gid AND d.token_id = u.id OFFSET 0) d
         WHERE d.state = 'leased' AND d.owner = p_owner AND d.attempts = u.attempt;
        EXIT WHEN v_tids IS NULL;
        WITH upd AS (
            UPDATE deliveries d
               SET state = CASE WHEN u.outcome IN ('retry', 'defer') THEN 'retry'
                                ELSE u.outcome END::delivery_state,
                   failures = d.failures + (u.outcome = 'retry')::INT,
                   reason = NULLIF(left(u.reason, 1000), ''),
                   cost_micros = CASE WHEN u.outcome = 'sent' THEN u.cost END,
                   owner = NULL,
                   holder_left = false,
                   due_at = CASE WHEN u.outcome IN ('retry', 'defer')
                                 THEN now() + make_interval(secs => u.retry_ms / 1000.0) END,
                   updated_at = now()
              FROM unnest(v_tids, v_ids, v_att, v_out, v_rsn, v_ms, v_cost)
                       AS u(tid, id, attempt, outcome, reason, retry_ms, cost)
             WHERE d.ctid = u.tid
               AND coalesce(d.group_id = gid AND d.token_id = u.id AND d.state = 'leased'
                            AND d.owner = p_owner AND d.attempts = u.attempt, false)
            RETURNING d.token_id, u.outcome, u.cost
        ), usage AS (
            INSERT INTO group_usage AS g (group_id, month, sent, cost_micros)
            SELECT gid, date_trunc('month', now() AT TIME ZONE 'UTC')::DATE, count(*),
                   coalesce(sum(cost), 0)
              FROM upd WHERE outcome = 'sent'
            HAVING count(*) > 0
            ON CONFLICT (group_id, month) DO UPDATE
               SET sent = g.sent + EXCLUDED.sent,
                   cost_micros = g.cost_micros + EXCLUDED.cost_micros
        )
        SELECT array_agg(token_id) INTO v_done FROM upd;
        RETURN QUERY SELECT unnest(v_done);
        EXIT WHEN coalesce(cardinality(v_done), 0) = cardinality(v_ids);
        -- The ids not written: their rows moved since the probe; probe them again.
        SELECT array_agg(u.id), array_agg(u.attempt), array_agg(u.outcome), array_agg(u.reason),
               array_agg(u.retry_ms), array_agg(u.cost)
          INTO v_ids, v_att, v_out, v_rsn, v_ms, v_cost
          FROM unnest(v_ids, v_att, v_out, v_rsn, v_ms, v_cost)
                   AS u(id, attempt, outcome, reason, retry_ms, cost)
          LEFT JOIN unnest(v_done) AS x(id) ON x.id = u.id
         WHERE x.id IS NULL;
    END LOOP;
END;
$$;

CREATE OR REPLACE FUNCTION mailroom_renew(p_group TEXT, p_owner TEXT, p_ids BIGINT[],
                                         p_attempts INT[], p_lease_ms INT)
    RETURNS SETOF BIGINT
    LANGUAGE plpgsql
    SET enable_seqscan = off SET enable_bitmapscan = off
    AS $$
DECLARE
    gid    INT;
    v_ids  BIGINT[];
    v_att  INT[];
    v_tids TID[];
    v_done BIGINT[];
BEGIN
    SELECT id INTO gid FROM consumer_groups WHERE name = p_group;
    IF NOT FOUND THEN
        RETURN;  -- as 0003's: nothing renewed
    END IF;
    SELECT array_agg(r.id), array_agg(r.attempt) INTO v_ids, v_att
      FROM (SELECT DISTINCT ON (r.id) *
              FROM unnest(p_ids, coalesce(p_attempts,
                                          array_fill(NULL::INT, ARRAY[cardinality(p_ids)])))
                       AS r(id, attempt)
             ORDER BY r.id) r;
    WHILE v_ids IS NOT NULL LOOP
        SELECT array_agg(d.ctid), array_agg(r.id), array_agg(r.attempt)
          INTO v_tids, v_ids, v_att
          FROM unnest(v_ids, v_att) AS r(id, attempt)
         CROSS JOIN LATERAL (SELECT d.ctid, d.state, d.owner, d.attempts FROM deliveries d
                              WHERE d.group_id = gid AND d.token_id = r.id OFFSET 0) d
         WHERE d.state = 'leased' AND d.owner = p_owner
           AND (r.attempt IS NULL OR d.attempts = r.attempt);
        EXIT WHEN v_tids IS NULL;
        WITH upd AS (
            UPDATE deliveries d
               SET due_at = now() + make_interval(secs => p_lease_ms / 1000.0),
                   holder_left = false
              FROM unnest(v_tids, v_ids, v_att) AS r(tid, id, attempt)
             WHERE d.ctid = r.tid
               AND coalesce(d.group_id = gid AND d.token_id = r.id AND d.state = 'leased'
                            AND d.owner = p_owner
                            AND (r.attempt IS NULL OR d.attempts = r.attempt), false)
            RETURNING d.token_id
        )
        SELECT array_agg(token_id) INTO v_done FROM upd;
        RETURN QUERY SELECT unnest(v_done);
        EXIT WHEN coalesce(cardinality(v_done), 0) = cardinality(v_ids);
        SELECT array_agg(r.id), array_agg(r.attempt) INTO v_ids, v_att
          FROM unnest(v_ids, v_att) AS r(id, attempt)
          LEFT JOIN unnest(v_done) AS x(id) ON x.id = r.id
         WHERE x.id IS NULL;
    END LOOP;
END;
$$;

CREATE OR REPLACE FUNCTION mailroom_dequeue(p_group TEXT, p_limit INT, p_owner TEXT,
                                            p_lease_ms INT,
                                            p_recoveries_only BOOLEAN DEFAULT false)
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
    v_tids     TID[];
    v_states   delivery_state[];
    v_whys     TEXT[];
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
    SELECT * INTO g FROM consumer_groups WHERE name = p_group FOR NO KEY UPDATE;
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
        -- The recovery lane: the activations' pass (and cursor) is left untouched.
        EXIT WHEN p_recoveries_only AND NOT v_rec;

        -- 1. Jobs of this class due again (locked here, leased again below).
        IF v_rec THEN
            SELECT array_agg(x.ctid) INTO v_tids
              FROM (SELECT d.ctid FROM deliveries d
                     WHERE d.group_id = g.id AND d.state IN ('leased', 'retry') AND d.recovery
                       AND d.due_at <= now()
                     ORDER BY d.due_at LIMIT v_left
                       FOR UPDATE SKIP LOCKED) x;
        ELSE
            SELECT array_agg(x.ctid) INTO v_tids
              FROM (SELECT d.ctid FROM deliveries d
                     WHERE d.group_id = g.id AND d.state IN ('leased', 'retry') AND NOT d.recovery
                       AND d.due_at <= now()
                     ORDER BY d.due_at LIMIT v_left
                       FOR UPDATE SKIP LOCKED) x;
        END IF;
        v_ids := NULL;
        IF v_tids IS NOT NULL THEN
            -- The rows are locked by this transaction since the statement above: their
            -- ctids stay theirs, and a TID scan is the only plan.
            WITH upd AS (
                UPDATE deliveries d
                   SET lost_leases = d.lost_leases + (d.state = 'leased' AND NOT d.holder_left)::INT,
                       attempts = d.attempts + 1, state = 'leased', owner = p_owner,
                       due_at = v_due, holder_left = false, updated_at = now()
                 WHERE d.ctid = ANY (v_tids)
                RETURNING d.token_id
            )
            SELECT array_agg(token_id) INTO v_ids FROM upd;
        END IF;

        IF v_ids IS NOT NULL THEN
            -- Finish those that must not be sent any more: read by one probe per job and
            -- table, then written by ctid (the rows are still locked by this transaction), one
            -- statement per finished job (few: most jobs due again are sent again).
            SELECT array_agg(x.ctid), array_agg(x.st), array_agg(x.why)
              INTO v_tids, v_states, v_whys
              FROM (SELECT d2.ctid,
                           CASE WHEN d2.lost_leases >= g.max_lost_leases THEN 'failed'
                                WHEN t.id IS NULL THEN 'cancelled'
                                WHEN t.superseded_by IS NOT NULL THEN 'superseded'
                                WHEN t.rate_limited THEN 'rate_limited'
                                WHEN t.expires_at <= v_now THEN 'expired'
                                WHEN NOT mailroom_token_sendable(ROW(t.*)::tokens, a.status, v_now)
                                     THEN 'cancelled'
                                WHEN sp.address IS NOT NULL THEN 'suppressed'
                           END::delivery_state AS st,
                           CASE WHEN d2.lost_leases >= g.max_lost_leases
                                     THEN format('lease ran out %s times without an outcome',
                                                 d2.lost_leases)
                                WHEN t.id IS NULL THEN 'token deleted'
                                WHEN t.superseded_by IS NOT NULL OR t.rate_limited
                                     THEN t.suppressed_reason
                                WHEN t.expires_at <= v_now THEN 'token expired before delivery'
                                WHEN NOT mailroom_token_sendable(ROW(t.*)::tokens, a.status, v_now)
                                     THEN 'token consumed or account status changed'
                                ELSE sp.why
                           END AS why
                      FROM unnest(v_ids) AS u(id)
                     CROSS JOIN LATERAL (SELECT d2.ctid, d2.token_id, d2.lost_leases
                                           FROM deliveries d2
                                          WHERE d2.group_id = g.id AND d2.token_id = u.id
                                         OFFSET 0) d2
                      LEFT JOIN LATERAL (SELECT t.* FROM tokens t WHERE t.id = d2.token_id
                                         OFFSET 0) t ON true
                      LEFT JOIN LATERAL (SELECT a.status, a.email FROM accounts a
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

            RETURN QUERY
            SELECT t.id, t.action, a.email::TEXT, a.login::TEXT, t.secret, t.code::TEXT,
                   t.expires_at, t.account, d.attempts, d.failures, t.created_at, a.locale
              FROM unnest(v_ids) AS u(id)
             CROSS JOIN LATERAL (SELECT d.attempts, d.failures, d.state FROM deliveries d
                                  WHERE d.group_id = g.id AND d.token_id = u.id OFFSET 0) d
             CROSS JOIN LATERAL (SELECT t.* FROM tokens t WHERE t.id = u.id OFFSET 0) t
             CROSS JOIN LATERAL (SELECT a.email, a.login, a.locale FROM accounts a
                                  WHERE a.id = t.account OFFSET 0) a
             WHERE d.state = 'leased';
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
                      FROM tokens t
                     CROSS JOIN LATERAL (SELECT a.email, a.login, a.locale, a.status
                                           FROM accounts a WHERE a.id = t.account OFFSET 0) a
                      LEFT JOIN LATERAL (SELECT * FROM mailroom_suppression(a.email) OFFSET 0) sp
                             ON true
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

CREATE OR REPLACE FUNCTION mailroom_holder_left(p_group TEXT, p_owner TEXT) RETURNS VOID
    LANGUAGE sql AS $$
    UPDATE deliveries d SET holder_left = true
      FROM consumer_groups g
     WHERE g.name = p_group AND d.group_id = g.id AND d.owner = p_owner AND d.state = 'leased';
$$;

CREATE OR REPLACE FUNCTION mailroom_stats(p_group TEXT)
    RETURNS TABLE (group_name TEXT, depth BIGINT, lag_seconds DOUBLE PRECISION,
                   in_flight BIGINT, waiting_retry BIGINT, sent BIGINT, failed BIGINT,
                   expired BIGINT, cancelled BIGINT, superseded BIGINT, rate_limited BIGINT,
                   suppressed BIGINT)
    LANGUAGE sql STABLE
    SET enable_seqscan = off SET jit = off
    AS $$
    SELECT g.name, w.depth,
           CASE WHEN w.depth = 0 THEN 0
                ELSE greatest(0, EXTRACT(EPOCH FROM now()) - w.oldest) END,
           f.in_flight, f.waiting_retry, c.sent, c.failed, c.expired, c.cancelled,
           c.superseded, c.rate_limited, c.suppressed
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
          SELECT count(*) FILTER (WHERE x.state = 'leased') AS in_flight,
                 count(*) FILTER (WHERE x.state = 'retry') AS waiting_retry
            FROM deliveries x
           WHERE x.group_id = g.id AND x.state IN ('leased', 'retry')) f
      CROSS JOIN LATERAL (
          SELECT coalesce(sum(k.n) FILTER (WHERE k.state = 'sent'), 0)::BIGINT AS sent,
                 coalesce(sum(k.n) FILTER (WHERE k.state = 'failed'), 0)::BIGINT AS failed,
                 coalesce(sum(k.n) FILTER (WHERE k.state = 'expired'), 0)::BIGINT AS expired,
                 coalesce(sum(k.n) FILTER (WHERE k.state = 'cancelled'), 0)::BIGINT AS cancelled,
                 coalesce(sum(k.n) FILTER (WHERE k.state = 'superseded'), 0)::BIGINT
                     AS superseded,
                 coalesce(sum(k.n) FILTER (WHERE k.state = 'rate_limited'), 0)::BIGINT
                     AS rate_limited,
                 coalesce(sum(k.n) FILTER (WHERE k.state = 'suppressed'), 0)::BIGINT
                     AS suppressed
            FROM delivery_counts k WHERE k.group_id = g.id) c
     WHERE p_group IS NULL OR p_group = '' OR g.name = p_group
     ORDER BY g.name;
$$;

CREATE OR REPLACE FUNCTION mailroom_budget_refund(p_margin_ms INT)
    RETURNS TABLE (group_name TEXT, holder TEXT, emails BIGINT)
    LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    h        RECORD;
    gr       RECORD;
    v_cutoff TIMESTAMPTZ := now() - make_interval(secs => greatest(p_margin_ms, 0) / 1000.0);
    v_left   BIGINT;
    v_n      INT;
BEGIN
    FOR h IN
        -- A linked holder whose newest grant expired before the cut-off (one index probe:
        -- max() of budget_grants_holder_idx's last column) and with something to give back.
        -- The lateral aggregate runs per holder, so the planner cannot turn it into a scan of
        -- every grant; the CASE sums a holder's grants only after its probe (a qual on l
        -- alone could be evaluated first, for every holder).
        SELECT l.group_id, l.holder
          FROM (SELECT DISTINCT s.group_id, s.holder FROM budget_subscriptions s) l
         CROSS JOIN LATERAL (SELECT max(bg.expires_at) AS newest FROM budget_grants bg
                              WHERE bg.group_id = l.group_id AND bg.holder = l.holder) n
         WHERE CASE WHEN n.newest < v_cutoff
                    THEN mailroom_budget_unspent(l.group_id, l.holder) > 0
                    ELSE false END
    LOOP
        -- The lock mailroom_budget_return takes too; then everything is read again under it.
        PERFORM 1 FROM budget_grants bg
          WHERE bg.group_id = h.group_id AND bg.holder = h.holder
          ORDER BY bg.id FOR UPDATE;
        CONTINUE WHEN EXISTS (SELECT 1 FROM budget_grants bg
                               WHERE bg.group_id = h.group_id AND bg.holder = h.holder
                                 AND bg.expires_at >= v_cutoff);
        CONTINUE WHEN EXISTS (SELECT 1 FROM budget_subscriptions s
                                JOIN deliveries d ON d.owner = s.owner AND d.group_id = s.group_id
                               WHERE s.group_id = h.group_id AND s.holder = h.holder
                                 AND d.state = 'leased' AND d.due_at > now());
        v_left := mailroom_budget_unspent(h.group_id, h.holder);  -- 0015's figure, under the lock
        CONTINUE WHEN v_left <= 0;
        group_name := (SELECT c.name FROM consumer_groups c WHERE c.id = h.group_id);
        holder := h.holder;
        emails := v_left;
        -- Newest grants first (the current month's, when a month ended in between).
        FOR gr IN
            SELECT bg.id, bg.month, bg.price_micros, bg.emails - bg.returned_emails AS room
              FROM budget_grants bg
             WHERE bg.group_id = h.group_id AND bg.holder = h.holder
               AND bg.returned_emails < bg.emails
             ORDER BY bg.id DESC
        LOOP
            EXIT WHEN v_left = 0;
            v_n := least(v_left, gr.room);
            UPDATE budget_grants SET returned_emails = returned_emails + v_n WHERE id = gr.id;
            UPDATE budget_months SET returned_micros = returned_micros + v_n * gr.price_micros
             WHERE group_id = h.group_id AND month = gr.month;
            v_left := v_left - v_n;
        END LOOP;
        UPDATE budget_grants bg SET refunded = true
         WHERE bg.group_id = h.group_id AND bg.holder = h.holder;
        RETURN NEXT;
    END LOOP;
END;
$$;

CREATE OR REPLACE FUNCTION mailroom_prune_budget_subscriptions(p_before TIMESTAMPTZ, p_batch INT)
    RETURNS TABLE (pruned BIGINT, last_id BIGINT, more BOOLEAN)
    LANGUAGE plpgsql AS $$
DECLARE
    v_n BIGINT;
BEGIN
    WITH victims AS (
        SELECT s.group_id, s.owner FROM budget_subscriptions s
         WHERE s.updated_at < p_before
           AND NOT EXISTS (SELECT 1 FROM budget_grants g
                            WHERE g.group_id = s.group_id AND g.holder = s.holder)
           AND NOT EXISTS (SELECT 1 FROM deliveries d
                            WHERE d.owner = s.owner AND d.state = 'leased'
                              AND d.group_id = s.group_id)
         LIMIT p_batch
           FOR UPDATE SKIP LOCKED
    ), del AS (
        DELETE FROM budget_subscriptions s USING victims v
         WHERE s.group_id = v.group_id AND s.owner = v.owner
        RETURNING 1
    )
    SELECT count(*) INTO v_n FROM del;
    RETURN QUERY SELECT v_n, 0::BIGINT, v_n = p_batch;
END;
$$;

CREATE OR REPLACE FUNCTION mailroom_prune_tokens(p_after BIGINT, p_before_epoch BIGINT, p_batch INT)
    RETURNS TABLE (pruned BIGINT, last_id BIGINT, more BOOLEAN)
    LANGUAGE plpgsql
    SET enable_seqscan = off SET enable_bitmapscan = off
    AS $$
DECLARE
    v_cutoff  BIGINT;
    v_ids     BIGINT[];
    v_seen    INT;
    v_last    BIGINT;
    v_n       BIGINT;
BEGIN
    SELECT least(p_before_epoch,
                 EXTRACT(EPOCH FROM now())::BIGINT - s.limit_window_seconds)
      INTO v_cutoff FROM mailroom_settings s;
    SELECT array_agg(w.id) FILTER (WHERE w.created_at < v_cutoff AND w.expires_at < v_cutoff),
           count(*), max(w.id)
      INTO v_ids, v_seen, v_last
      FROM (SELECT t.id, t.created_at, t.expires_at FROM tokens t
             WHERE t.id > p_after ORDER BY t.id LIMIT p_batch) w;
    v_n := 0;
    IF v_ids IS NOT NULL THEN
        WITH victims AS (
            SELECT t.id FROM tokens t
             WHERE t.id = ANY (v_ids)
               AND t.created_at < v_cutoff AND t.expires_at < v_cutoff
               AND NOT EXISTS (SELECT 1 FROM consumer_groups g
                                 JOIN deliveries d ON d.group_id = g.id AND d.token_id = t.id)
               FOR UPDATE OF t SKIP LOCKED
        ), del AS (
            DELETE FROM tokens t USING victims v WHERE t.id = v.id
            RETURNING 1
        )
        SELECT count(*) INTO v_n FROM del;
    END IF;
    -- Go on while a window deletes something. Walking on through tokens kept for their
    -- deliveries would make a pass O(tokens) whenever deliveries lag behind.
    RETURN QUERY SELECT v_n, coalesce(v_last, p_after), v_seen = p_batch AND v_n > 0;
END;
$$;

DROP FUNCTION mailroom_batch_record(BIGINT[], INT[]);
DROP FUNCTION mailroom_batch_match(INT, TEXT, BIGINT[], INT[]);
DROP TABLE lease_batches;
