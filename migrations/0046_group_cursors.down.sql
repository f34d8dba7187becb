-- Back before 0046: the cursors return to consumer_groups' twelve columns (each class's from
-- its row of group_cursors), group_cursors and dequeue_token are dropped, and the functions
-- that read the cursors are put back as they were (not left to their source files, which read
-- group_cursors), so that dequeues go on until the next `collector migrate up`.
DROP FUNCTION IF EXISTS mailroom.mailroom_dequeue_new(integer, mailroom.action_priority, integer, text, timestamp with time zone, text[], mailroom.account_status[]);
DROP FUNCTION IF EXISTS mailroom.mailroom_dequeue_claim(integer, mailroom.action_priority, text, timestamp with time zone, mailroom.dequeue_token[]);
DROP FUNCTION IF EXISTS mailroom.mailroom_dequeue_scan(mailroom.action_priority, xid8, bigint, xid8, pg_snapshot, pg_snapshot, integer, text[], mailroom.account_status[]);
DROP FUNCTION IF EXISTS mailroom.mailroom_dequeue_due(integer, integer, boolean, integer, text, timestamp with time zone, text[], mailroom.account_status[]);
DROP FUNCTION IF EXISTS mailroom.mailroom_dequeue_finish(integer, integer, bigint[], text[], mailroom.account_status[]);
DROP FUNCTION IF EXISTS mailroom.mailroom_dequeue_expire(integer, boolean);

ALTER TABLE mailroom.consumer_groups
    ADD COLUMN prev_snapshot pg_snapshot, ADD COLUMN cur_snapshot pg_snapshot,
    ADD COLUMN pos_txid xid8, ADD COLUMN pos_id bigint,
    ADD COLUMN rec_prev_snapshot pg_snapshot, ADD COLUMN rec_cur_snapshot pg_snapshot,
    ADD COLUMN rec_pos_txid xid8, ADD COLUMN rec_pos_id bigint,
    ADD COLUMN notice_prev_snapshot pg_snapshot, ADD COLUMN notice_cur_snapshot pg_snapshot,
    ADD COLUMN notice_pos_txid xid8, ADD COLUMN notice_pos_id bigint;
UPDATE mailroom.consumer_groups g
   SET prev_snapshot = n.prev_snapshot, cur_snapshot = n.cur_snapshot, pos_txid = n.pos_txid,
       pos_id = n.pos_id,
       rec_prev_snapshot = r.prev_snapshot, rec_cur_snapshot = r.cur_snapshot,
       rec_pos_txid = r.pos_txid, rec_pos_id = r.pos_id,
       notice_prev_snapshot = o.prev_snapshot, notice_cur_snapshot = o.cur_snapshot,
       notice_pos_txid = o.pos_txid, notice_pos_id = o.pos_id
  FROM mailroom.group_cursors n, mailroom.group_cursors r, mailroom.group_cursors o
 WHERE n.group_id = g.id AND n.priority = 'normal'
   AND r.group_id = g.id AND r.priority = 'critical'
   AND o.group_id = g.id AND o.priority = 'notice';
UPDATE mailroom.consumer_groups SET prev_snapshot = pg_current_snapshot()
 WHERE prev_snapshot IS NULL;
ALTER TABLE mailroom.consumer_groups ALTER COLUMN prev_snapshot SET NOT NULL;
DROP TABLE mailroom.group_cursors;
DROP TYPE mailroom.dequeue_token;

-- Leases up to p_limit jobs of a group to p_owner for p_lease_ms, class by class (the
-- action's priority: critical, then normal, then notice), each class first its lease batches
-- and jobs due again (leases that ran out, retries whose time has come), then its new tokens
-- from its own snapshot window (its own cursor: rec_* for critical, notice_* for notices),
-- leased as one lease_batches row per window (`recovery` marks the critical class).
-- p_recoveries_only: the critical class only (the lane). Notices are not leased while the
-- group's month has less than mailroom_settings.notice_pause_percent of its budget left
-- (p_default_budget: the collector's default for a group without a budget of its own); they
-- wait, and expire unsent if the budget stays short (docs/design.md, "Priority classes").
-- Each job carries its action's name; its secret is NULL for an action without one, its code
-- NULL for an action without one (but activation's, sent unsigned as before), its address the
-- token's to_address where it has one, its priority its token's class. Serialised per group by the group row's
-- lock, so two collectors never hand the same job out twice. Tokens that are expired,
-- consumed, for an account in the wrong status, superseded, rate limited or to a suppressed
-- address are not handed out: they are recorded with that state and the reason. Plans are
-- made once per session (force_generic_plan) and the window's bounds are written as the
-- index range. The calling transaction commits asynchronously (synchronous_commit off, which a
-- caller may set back on after the call): a lost dequeue only hands its jobs out again.
CREATE OR REPLACE FUNCTION mailroom.mailroom_dequeue(p_group text, p_limit integer, p_owner text, p_lease_ms integer, p_recoveries_only boolean DEFAULT false, p_default_budget bigint DEFAULT NULL) RETURNS TABLE(job_id bigint, action text, email text, login text, secret bytea, code text, expires_at bigint, account_id bigint, attempt integer, failures integer, created_at bigint, locale text, priority text)
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    SET enable_seqscan TO 'off'
    SET enable_bitmapscan TO 'off'
    SET enable_sort TO 'off'
    SET plan_cache_mode TO 'force_generic_plan'
    SET jit TO 'off'
    AS $$
#variable_conflict use_column
DECLARE
    g          consumer_groups%ROWTYPE;
    v_due      TIMESTAMPTZ := now() + make_interval(secs => p_lease_ms / 1000.0);
    v_now      BIGINT := EXTRACT(EPOCH FROM now())::BIGINT;
    v_left     INT := p_limit;
    v_class    action_priority;
    v_paused   BOOLEAN;
    v_nosecret TEXT[];
    v_nocode   TEXT[];
    v_names    TEXT[];
    v_needed   account_status[];
    v_rec      BOOLEAN;
    v_prev     PG_SNAPSHOT;
    v_cur      PG_SNAPSHOT;
    v_pos_txid XID8;
    v_pos_id   BIGINT;
    v_opened   BOOLEAN;
    v_seek     BOOLEAN;
    v_seg      XID8;
    v_hi       XID8;
    v_found    INT;
    v_ids      BIGINT[];
    v_tids     TID[];
    v_states   delivery_state[];
    v_whys     TEXT[];
    v_txids    XID8[];
    v_actions  TEXT[];
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
    v_moved    BOOLEAN := FALSE;
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    SELECT * INTO g FROM consumer_groups WHERE name = p_group FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown consumer group "%"', p_group USING ERRCODE = 'no_data_found';
    END IF;
    IF g.rec_prev_snapshot IS NULL THEN
        -- A group never dequeued from: the recoveries' cursor starts where the activations' is.
        g.rec_prev_snapshot := g.prev_snapshot;
        g.rec_cur_snapshot := g.cur_snapshot;
        g.rec_pos_txid := g.pos_txid;
        g.rec_pos_id := g.pos_id;
        v_moved := TRUE;
    END IF;
    IF g.notice_prev_snapshot IS NULL THEN
        -- The notices' cursor starts where the normal class's is.
        g.notice_prev_snapshot := g.prev_snapshot;
        g.notice_cur_snapshot := g.cur_snapshot;
        g.notice_pos_txid := g.pos_txid;
        g.notice_pos_id := g.pos_id;
        v_moved := TRUE;
    END IF;
    -- The actions whose jobs carry no secret, or no code, and the account status each needs
    -- (read once per call: a small table; v_needed[array_position(v_names, action)]).
    SELECT coalesce(array_agg(x.name) FILTER (WHERE NOT x.carries_secret), '{}'),
           coalesce(array_agg(x.name) FILTER (WHERE NOT x.carries_code
                                              AND x.name <> 'activation'), '{}'),
           array_agg(x.name), array_agg(x.account_status)
      INTO v_nosecret, v_nocode, v_names, v_needed
      FROM actions x;

    -- 0. Lease batches whose lease ran out (of the lanes this call serves): their jobs without
    --    an outcome become per-job rows as their lease left them ('leased', the batch's owner,
    --    lease end and holder_left, attempt 1), due at once: step 1 hands them out again like
    --    any other lease that ran out (attempt 2, lost_leases + 1 unless the holder left). A
    --    batch an acknowledgement holds right now is skipped and taken at a later call. The
    --    retention's mailroom_expire_leases runs the same statement with a limit; it is written
    --    out here because calling a shared function cost an empty dequeue 0.06-0.2 ms more
    --    (0.45-0.68 ms without it, measured alternately).
    IF p_limit > 0 THEN
        WITH x AS (
            SELECT b.batch_id FROM lease_batches b
             WHERE b.group_id = g.id AND b.state = 'leased' AND b.due_at <= now()
               AND (b.recovery OR NOT p_recoveries_only)
             -- The order makes the plan lease_batches_due_idx's range even without
             -- statistics (as the due-again scans of deliveries below).
             ORDER BY b.due_at
               FOR UPDATE SKIP LOCKED
        ), e AS (
            UPDATE lease_batches b SET state = 'expired', updated_at = now()
              FROM x
             WHERE b.batch_id = x.batch_id
            RETURNING b.group_id, b.owner, b.due_at, b.holder_left, b.recovery, b.ids, b.done
        )
        INSERT INTO deliveries (group_id, token_id, state, attempts, owner, due_at, holder_left,
                                recovery)
        SELECT e.group_id, u.id, 'leased', 1, e.owner, e.due_at, e.holder_left, e.recovery
          FROM e CROSS JOIN LATERAL unnest(e.ids) WITH ORDINALITY AS u(id, slot)
         WHERE get_bit(e.done, u.slot::INT - 1) = 0
        ON CONFLICT DO NOTHING;
    END IF;

    FOREACH v_class IN ARRAY ARRAY['critical', 'normal', 'notice']::action_priority[] LOOP
        EXIT WHEN v_left <= 0;
        v_rec := v_class = 'critical';
        -- The critical lane: the other classes' passes (and cursors) are left untouched.
        EXIT WHEN p_recoveries_only AND NOT v_rec;
        IF v_class = 'notice' THEN
            -- Notices wait while the month's budget left is under the pause threshold.
            SELECT b.budget_micros IS NOT NULL
                   AND (b.budget_micros - b.committed_micros) * 100
                       < b.budget_micros * st.notice_pause_percent
              INTO v_paused
              FROM mailroom_budget_state(g.id, p_default_budget, 0) b
             CROSS JOIN mailroom_settings st;
            EXIT WHEN v_paused;
        END IF;

        -- 1. Jobs of this class due again (locked here, leased again below); notices' with the
        --    normal class's (they are not told apart once leased).
        IF v_class = 'notice' THEN
            v_tids := NULL;
        ELSIF v_rec THEN
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
                                WHEN NOT mailroom_token_sendable(ROW(t.*)::tokens, a.status, v_now,
                                                             v_needed[array_position(v_names, t.action)])
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
                                WHEN NOT mailroom_token_sendable(ROW(t.*)::tokens, a.status, v_now,
                                                             v_needed[array_position(v_names, t.action)])
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

            RETURN QUERY
            SELECT t.id, t.action, coalesce(t.to_address, a.email::TEXT), a.login::TEXT,
                   CASE WHEN t.action = ANY (v_nosecret) THEN NULL ELSE t.secret END,
                   CASE WHEN t.action = ANY (v_nocode) THEN NULL ELSE t.code::TEXT END,
                   t.expires_at, t.account, d.attempts, d.failures, t.created_at, a.locale,
                   t.priority::TEXT
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
        ELSIF v_class = 'notice' THEN
            v_prev := g.notice_prev_snapshot; v_cur := g.notice_cur_snapshot;
            v_pos_txid := g.notice_pos_txid; v_pos_id := g.notice_pos_id;
        ELSE
            v_prev := g.prev_snapshot; v_cur := g.cur_snapshot;
            v_pos_txid := g.pos_txid; v_pos_id := g.pos_id;
        END IF;
        v_opened := FALSE;
        v_seek := FALSE;
        v_found := 0;
        WHILE v_left > 0 LOOP
            IF v_cur IS NULL THEN
                EXIT WHEN v_opened;  -- at most one fresh window per cursor and call
                v_cur := pg_current_snapshot();
                v_pos_txid := NULL;
                v_opened := TRUE;
                v_seek := TRUE;
                v_found := 0;
            END IF;
            -- A window's new tokens are those of the transactions in progress at its lower
            -- snapshot that have committed by its upper one (each its own segment: one txid,
            -- probed), then those from the lower snapshot's xmax up (one range), as PgQ reads a
            -- batch: never the range from the lower snapshot's xmin, which a transaction
            -- running anywhere in the cluster (any database, any role) holds back, so that every
            -- window would read again every token committed since it began (docs/design.md,
            -- "The queue follows snapshots, not ids"). The segment at or after v_pos_txid
            -- (NULL: the window's first): the smallest such txid that has tokens of this class,
            -- else the lower snapshot's xmax.
            IF v_seek THEN
                -- One probe of tokens_priority_txid_id_idx per such transaction (OFFSET 0 keeps
                -- the EXISTS a probe per row: made a semi-join, it was planned as a read of the
                -- whole class, materialized, while the table had no statistics).
                SELECT min(x.x) INTO v_seg FROM pg_snapshot_xip(v_prev) x
                 WHERE (v_pos_txid IS NULL OR x.x >= v_pos_txid)
                   AND pg_visible_in_snapshot(x.x, v_cur)
                   AND EXISTS (SELECT 1 FROM tokens t
                                WHERE t.priority = v_class AND t.txid = x.x OFFSET 0);
                v_pos_txid := coalesce(v_seg, pg_snapshot_xmax(v_prev));
                v_pos_id := 0;
                v_seek := FALSE;
            END IF;
            IF v_pos_txid < pg_snapshot_xmax(v_prev) THEN
                v_seg := v_pos_txid;
                v_hi := (v_pos_txid::TEXT::BIGINT + 1)::TEXT::XID8;
            ELSE
                v_seg := NULL;
                v_hi := pg_snapshot_xmax(v_cur);
            END IF;

            -- One pass over the window (index range scan on (priority, txid, id)) collects
            -- everything the jobs need; the lease rows are written from it without looking the
            -- tokens up again.
            SELECT array_agg(w.id), array_agg(w.txid), array_agg(w.action), array_agg(w.email),
                   array_agg(w.login), array_agg(w.secret), array_agg(w.code),
                   array_agg(w.expires_at), array_agg(w.account), array_agg(w.created_at),
                   array_agg(w.ok), array_agg(w.skip), array_agg(w.locale),
                   array_agg(w.suppressed_reason)
              INTO v_ids, v_txids, v_actions, v_emails, v_logins, v_secrets, v_codes, v_expires,
                   v_accounts, v_created, v_ok, v_skip, v_locales, v_reasons
              FROM (SELECT t.id, t.txid, t.action, coalesce(t.to_address, a.email::TEXT) AS email,
                           a.login::TEXT AS login,
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
                      LEFT JOIN LATERAL (SELECT * FROM mailroom_suppression(
                                                    coalesce(t.to_address, a.email)) OFFSET 0) sp
                             ON true
                     CROSS JOIN LATERAL (SELECT mailroom_token_sendable(t, a.status, v_now,
                                                  v_needed[array_position(v_names, t.action)])
                                                AS sendable) s0
                     CROSS JOIN LATERAL (SELECT s0.sendable AND t.superseded_by IS NULL
                                               AND NOT t.rate_limited AND sp.address IS NULL AS ok,
                                               s0.sendable) s
                     -- The class and the cursor as the range's two ends
                     -- t.priority = v_class, (t.txid, t.id) > the cursor, t.txid < the
                     -- segment's end (its txid + 1, or the upper snapshot's xmax).
                     WHERE (t.priority, t.txid, t.id) > (v_class, v_pos_txid, v_pos_id)
                       AND (t.priority, t.txid) < (v_class, v_hi)
                       AND pg_visible_in_snapshot(t.txid, v_cur)
                       AND NOT pg_visible_in_snapshot(t.txid, v_prev)
                     ORDER BY t.priority, t.txid, t.id
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
                    -- One lease row for the jobs of this window, one bit each.
                    INSERT INTO lease_batches (group_id, owner, recovery, due_at, ids, done,
                                               kept, lo_id, hi_id)
                    SELECT g.id, p_owner, v_rec, v_due, array_agg(r.id),
                           repeat('0', count(*)::INT)::VARBIT, repeat('0', count(*)::INT)::VARBIT,
                           min(r.id), max(r.id)
                      FROM r
                    HAVING count(*) > 0
                )
                SELECT r.id, r.action, r.email, r.login,
                       CASE WHEN r.action = ANY (v_nosecret) THEN NULL ELSE r.secret END,
                       CASE WHEN r.action = ANY (v_nocode) THEN NULL ELSE r.code END,
                       r.expires_at, r.account, 1, 0, r.created_at, r.locale, v_class::TEXT
                  FROM r;
                GET DIAGNOSTICS v_returned = ROW_COUNT;

                -- Tokens not to send are recorded too, so that every token of the group ends
                -- with an outcome and a reason (expired, consumed, wrong
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

            v_found := v_found + v_count;
            IF v_count < v_left AND v_seg IS NOT NULL THEN
                -- A transaction's segment read whole: the window goes on at the next one.
                v_pos_txid := (v_seg::TEXT::BIGINT + 1)::TEXT::XID8;
                v_seek := TRUE;
                v_moved := v_moved OR v_count > 0;
            ELSIF v_count = 0 AND v_opened AND v_found = 0 THEN
                -- A fresh window without a token of this class: the lower bound stays (the
                -- next window, from the same bound, holds no token of this window either), so
                -- a call that finds nothing new does not write the group's row.
                v_cur := NULL;
                v_pos_txid := NULL;
                v_pos_id := NULL;
            ELSIF v_count < v_left THEN
                -- Window exhausted: its upper snapshot becomes the lower bound.
                v_prev := v_cur;
                v_cur := NULL;
                v_pos_txid := NULL;
                v_pos_id := NULL;
                v_moved := TRUE;
            ELSE
                v_pos_txid := v_txids[v_count];
                v_pos_id := v_ids[v_count];
                v_moved := TRUE;
            END IF;
            v_left := v_left - v_returned;
        END LOOP;

        IF v_rec THEN
            g.rec_prev_snapshot := v_prev; g.rec_cur_snapshot := v_cur;
            g.rec_pos_txid := v_pos_txid; g.rec_pos_id := v_pos_id;
        ELSIF v_class = 'notice' THEN
            g.notice_prev_snapshot := v_prev; g.notice_cur_snapshot := v_cur;
            g.notice_pos_txid := v_pos_txid; g.notice_pos_id := v_pos_id;
        ELSE
            g.prev_snapshot := v_prev; g.cur_snapshot := v_cur;
            g.pos_txid := v_pos_txid; g.pos_id := v_pos_id;
        END IF;
    END LOOP;

    IF NOT v_moved THEN
        RETURN;
    END IF;
    UPDATE consumer_groups
       SET prev_snapshot = g.prev_snapshot, cur_snapshot = g.cur_snapshot,
           pos_txid = g.pos_txid, pos_id = g.pos_id,
           rec_prev_snapshot = g.rec_prev_snapshot, rec_cur_snapshot = g.rec_cur_snapshot,
           rec_pos_txid = g.rec_pos_txid, rec_pos_id = g.rec_pos_id,
           notice_prev_snapshot = g.notice_prev_snapshot,
           notice_cur_snapshot = g.notice_cur_snapshot,
           notice_pos_txid = g.notice_pos_txid, notice_pos_id = g.notice_pos_id
     WHERE id = g.id;
END;
$$;

-- Creates a group if missing; no-op if it exists. With p_from_earliest the group starts at the
-- earliest token that has not expired yet, so it receives every token still sendable (the
-- collector creates its MAILROOM_GROUPS this way, and a Subscribe with start_from_earliest);
-- otherwise it receives tokens committed from now on (as mailroom_ensure_group(TEXT)).
--
-- The group's cursor is its prev_snapshot: a token is ahead of the group when its transaction
-- is not visible in it. The snapshot 'x:x:' sees exactly the transactions before x, so x is the
-- oldest of the earliest unexpired token's transaction and the oldest transaction still in
-- progress (which may be inserting tokens we cannot see yet). Expired tokens after x are
-- scanned too and recorded as expired.

CREATE OR REPLACE FUNCTION mailroom.mailroom_ensure_group(p_group text) RETURNS void
    LANGUAGE sql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
    INSERT INTO consumer_groups (name, prev_snapshot) VALUES (p_group, pg_current_snapshot())
    ON CONFLICT (name) DO NOTHING;
$$;

CREATE OR REPLACE FUNCTION mailroom.mailroom_ensure_group(p_group text, p_from_earliest boolean) RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
DECLARE
    v_from XID8;
    v_snapshot PG_SNAPSHOT := pg_current_snapshot();
BEGIN
    IF EXISTS (SELECT 1 FROM consumer_groups WHERE name = p_group) THEN
        RETURN;
    END IF;
    IF p_from_earliest THEN
        -- One probe per priority class on tokens_priority_txid_id_idx.
        SELECT least(pg_snapshot_xmin(v_snapshot),
                     (SELECT min(e.txid)
                        FROM unnest(enum_range(NULL::action_priority)) k(priority)
                       CROSS JOIN LATERAL (
                             SELECT t.txid FROM tokens t
                              WHERE t.priority = k.priority
                                AND t.expires_at > EXTRACT(EPOCH FROM now())::BIGINT
                              ORDER BY t.priority, t.txid LIMIT 1) e))
          INTO v_from;
        v_snapshot := format('%s:%s:', v_from, v_from)::PG_SNAPSHOT;
    END IF;
    INSERT INTO consumer_groups (name, prev_snapshot) VALUES (p_group, v_snapshot)
    ON CONFLICT (name) DO NOTHING;
END;
$$;

-- Per-group statistics for operators, of one group or of every group (p_group NULL or ''):
-- depth (committed tokens of every action not yet scanned, each priority class after its own
-- cursor, and the queued signups not yet collected), lag (age of the oldest of them) and jobs
-- by state; in flight counts the batch jobs
-- without an outcome too. Cost: O(depth + deliveries of the group).
CREATE OR REPLACE FUNCTION mailroom.mailroom_stats(p_group text) RETURNS TABLE(group_name text, depth bigint, lag_seconds double precision, in_flight bigint, waiting_retry bigint, sent bigint, failed bigint, expired bigint, cancelled bigint, superseded bigint, rate_limited bigint, suppressed bigint)
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, mailroom, pg_temp
    SET enable_seqscan TO 'off'
    SET jit TO 'off'
    AS $$
    SELECT g.name, w.depth + q.n,
           CASE WHEN w.depth + q.n = 0 THEN 0
                ELSE greatest(0, EXTRACT(EPOCH FROM now()) - least(w.oldest, q.oldest)) END,
           f.in_flight + fb.in_flight, f.waiting_retry, c.sent, c.failed, c.expired, c.cancelled,
           c.superseded, c.rate_limited, c.suppressed
      FROM consumer_groups g
      -- Queued signups, not yet collected: every group's tokens to come.
      CROSS JOIN (SELECT count(*) AS n, min(s.requested_at) AS oldest FROM mailroom_signups s) q
      CROSS JOIN LATERAL (
          SELECT sum(c.depth)::BIGINT AS depth, min(c.oldest) AS oldest
            FROM (VALUES ('normal'::action_priority, g.prev_snapshot, g.cur_snapshot,
                          g.pos_txid, g.pos_id),
                         ('critical'::action_priority,
                          coalesce(g.rec_prev_snapshot, g.prev_snapshot),
                          CASE WHEN g.rec_prev_snapshot IS NULL THEN g.cur_snapshot
                               ELSE g.rec_cur_snapshot END,
                          CASE WHEN g.rec_prev_snapshot IS NULL THEN g.pos_txid
                               ELSE g.rec_pos_txid END,
                          CASE WHEN g.rec_prev_snapshot IS NULL THEN g.pos_id
                               ELSE g.rec_pos_id END),
                         ('notice'::action_priority,
                          coalesce(g.notice_prev_snapshot, g.prev_snapshot),
                          CASE WHEN g.notice_prev_snapshot IS NULL THEN g.cur_snapshot
                               ELSE g.notice_cur_snapshot END,
                          CASE WHEN g.notice_prev_snapshot IS NULL THEN g.pos_txid
                               ELSE g.notice_pos_txid END,
                          CASE WHEN g.notice_prev_snapshot IS NULL THEN g.pos_id
                               ELSE g.notice_pos_id END))
                 AS k(priority, prev, cur, pos_txid, pos_id)
           -- The tokens the cursor's lower snapshot does not see: those of the transactions in
           -- progress at it (probed by txid) and those from its xmax up, as the dequeue's
           -- window reads them; never the range from its xmin, which a transaction left open
           -- anywhere in the cluster holds back.
           CROSS JOIN LATERAL (
               SELECT count(*) AS depth, min(t.created_at) AS oldest
                 FROM (SELECT t.txid, t.id, t.created_at FROM tokens t
                        WHERE t.priority = k.priority AND t.txid >= pg_snapshot_xmax(k.prev)
                       UNION ALL
                       -- A probe per transaction (OFFSET 0: never a join that reads the class).
                       SELECT t.txid, t.id, t.created_at
                         FROM pg_snapshot_xip(k.prev) x
                        CROSS JOIN LATERAL (SELECT t.txid, t.id, t.created_at FROM tokens t
                                             WHERE t.priority = k.priority AND t.txid = x.x
                                            OFFSET 0) t) t
                WHERE k.cur IS NULL
                   OR NOT pg_visible_in_snapshot(t.txid, k.cur)
                   OR (t.txid, t.id) > (k.pos_txid, k.pos_id)) c) w
      CROSS JOIN LATERAL (
          SELECT count(*) FILTER (WHERE x.state = 'leased') AS in_flight,
                 count(*) FILTER (WHERE x.state = 'retry') AS waiting_retry
            FROM deliveries x
           WHERE x.group_id = g.id AND x.state IN ('leased', 'retry')) f
      CROSS JOIN LATERAL (
          SELECT coalesce(sum(length(b.done) - b.acked), 0)::BIGINT AS in_flight
            FROM lease_batches b
           WHERE b.group_id = g.id AND b.state = 'leased') fb
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

-- Whether group p_group is paced by a budget and one of its critical emails (password
-- recoveries, sign-in codes, address changes: the actions of class critical) waits to be
-- sent: committed less than p_hold_ms ago and not yet scanned by the group's recovery cursor
-- (neither rate limited nor superseded), or leased to a subscriber that may still send it (its
-- lease has not run out, its holder has not left, and it was handed out less than p_hold_ms
-- ago: a holder that has not sent it by then holds activations back no longer). And the group's
-- pace in emails per second at p_price (Infinity: unlimited). No row for an unknown group. The
-- queued ones are read as mailroom_stats reads depth, on tokens_priority_txid_id_idx; the
-- leased batches on lease_batches_recovery_idx. The collector grants activations no slot while
-- it says true (docs/design.md, "Recoveries first across senders").
CREATE OR REPLACE FUNCTION mailroom.mailroom_budget_recovery_first(p_group TEXT, p_price BIGINT,
                                                          p_hold_ms INT, p_default_budget BIGINT,
                                                          p_default_reserve INT)
    RETURNS TABLE (waiting BOOLEAN, pace_per_second DOUBLE PRECISION)
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
    SELECT s.budget_micros IS NOT NULL
           AND (EXISTS (SELECT 1 FROM lease_batches b
                         WHERE b.group_id = g.id AND b.state = 'leased' AND b.recovery
                           AND b.due_at > now() AND NOT b.holder_left
                           AND b.created_at > now() - make_interval(secs => p_hold_ms / 1000.0))
                OR EXISTS (SELECT 1 FROM deliveries d
                            WHERE d.group_id = g.id AND d.state = 'leased' AND d.recovery
                              AND d.due_at > now() AND NOT d.holder_left
                              AND d.updated_at > now() - make_interval(secs => p_hold_ms / 1000.0))
                OR EXISTS (SELECT 1 FROM tokens t
                            WHERE t.priority = 'critical'
                              AND t.txid >= pg_snapshot_xmin(k.prev)
                              AND NOT pg_visible_in_snapshot(t.txid, k.prev)
                              AND (k.cur IS NULL
                                   OR NOT pg_visible_in_snapshot(t.txid, k.cur)
                                   OR (t.txid, t.id) > (k.pos_txid, k.pos_id))
                              AND t.created_at > EXTRACT(EPOCH FROM now())::BIGINT - p_hold_ms / 1000
                              AND NOT t.rate_limited AND t.superseded_by IS NULL)),
           CASE WHEN s.budget_micros IS NULL THEN 'Infinity'::DOUBLE PRECISION
                ELSE greatest(s.budget_micros - s.committed_micros, 0) / s.seconds_left / p_price
           END
      FROM consumer_groups g
     -- The recoveries' cursor (a group that never dequeued since 0010: the activations').
     CROSS JOIN LATERAL (SELECT coalesce(g.rec_prev_snapshot, g.prev_snapshot) AS prev,
                                CASE WHEN g.rec_prev_snapshot IS NULL THEN g.cur_snapshot
                                     ELSE g.rec_cur_snapshot END AS cur,
                                CASE WHEN g.rec_prev_snapshot IS NULL THEN g.pos_txid
                                     ELSE g.rec_pos_txid END AS pos_txid,
                                CASE WHEN g.rec_prev_snapshot IS NULL THEN g.pos_id
                                     ELSE g.rec_pos_id END AS pos_id) k
     CROSS JOIN LATERAL mailroom_budget_state(g.id, p_default_budget, p_default_reserve) s
     WHERE g.name = p_group;
$$;

