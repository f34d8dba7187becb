-- Batch leases (issue 13 §2, PgQ's design direction): success is recorded per batch, not per job.
--
-- Until 0020 every job handed out wrote one `deliveries` row ('leased') and every SENT outcome
-- updated it: about 12-14 of the 16.8 µs PostgreSQL spent per drained job (BENCHMARKS.md,
-- "Where a drained job's time goes"), and 679 WAL bytes per job.
--
-- Now a dequeue's new tokens (attempt 1) are leased as one `lease_batches` row per window and
-- class: the ids, one bit per job ("its outcome is recorded"), the holder (owner), the lease end
-- and holder_left, as a deliveries row has them. A SENT outcome without a provider message id
-- sets its job's bit: one row update per batch and acknowledgement, counted in delivery_counts
-- and group_usage directly. Everything else keeps its per-job `deliveries` row, exactly as
-- before: tokens not to send, outcomes other than SENT, SENT with a provider message id (SES:
-- feedback finds the job by it), jobs handed back (Release), jobs handed out again (attempt
-- >= 2). Those rows are inserted with the job's bit set, in the same transaction.
--
-- Fencing is unchanged for callers. An outcome (owner, id, attempt) is recorded in a batch only
-- while the batch is 'leased' to that owner, attempt = 1 and the job's bit is unset; the
-- acknowledgement locks the batch rows it touches. When a batch's lease runs out, the next
-- dequeue of its group and class turns its jobs without an outcome into 'leased' deliveries rows
-- (owner, lease end and holder_left of the batch, attempt 1) and marks it 'expired'; the due
-- path then hands them out again as any expired lease (attempt 2, lost_leases + 1 unless the
-- holder left). A late acknowledgement of attempt 1 is then fenced by those rows as before. A
-- batch's jobs share one lease end: renewing any of them renews the batch.
--
-- The per-job picture (deliveries rows and the batch jobs without one) is the view
-- `delivery_states`, with the columns of deliveries. mailroom_stats counts a batch's jobs
-- without an outcome as in flight. The retention pass deletes finished batches after the
-- retention, as it deletes finished deliveries (mailroom_prune_lease_batches); a token is kept
-- as long as a batch holds it, as it is kept as long as a deliveries row does. SES feedback that
-- overtakes the acknowledgement gives the job its own row (leased, as the batch leases it) and is
-- recorded on it, as before.

CREATE TABLE lease_batches (
    batch_id    BIGSERIAL PRIMARY KEY,
    group_id    INT NOT NULL,
    owner       TEXT NOT NULL,
    recovery    BOOLEAN NOT NULL,
    -- 'leased': some job has no outcome yet; 'done': every job has one; 'expired': its lease ran
    -- out and its jobs without an outcome became deliveries rows.
    state       TEXT NOT NULL DEFAULT 'leased' CHECK (state IN ('leased', 'done', 'expired')),
    holder_left BOOLEAN NOT NULL DEFAULT false,
    due_at      TIMESTAMPTZ NOT NULL,
    ids         BIGINT[] NOT NULL,
    done        BIT VARYING NOT NULL,  -- bit i - 1 set: ids[i] has its outcome recorded
    kept        BIT VARYING NOT NULL,  -- bit i - 1 set: ids[i] has a deliveries row of its own
    acked       INT NOT NULL DEFAULT 0,  -- bits set
    lo_id       BIGINT NOT NULL,  -- min(ids)
    hi_id       BIGINT NOT NULL,  -- max(ids)
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
-- Lease ends per group (expiry, in-flight count) and leases per holder (acknowledgements,
-- renewals), both over leased batches only; finished batches by id for the retention pass.
-- updated_at is in no index, so an acknowledgement that leaves the batch leased is a HOT update.
CREATE INDEX lease_batches_due_idx ON lease_batches (group_id, due_at) WHERE state = 'leased';
CREATE INDEX lease_batches_owner_idx ON lease_batches (owner, group_id) WHERE state = 'leased';
CREATE INDEX lease_batches_finished_idx ON lease_batches (batch_id) WHERE state <> 'leased';
-- The batch of a job by its id (id ranges of batches overlap when transactions interleave):
-- for feedback that arrives before the acknowledgement and for token pruning.
CREATE INDEX lease_batches_range_idx ON lease_batches USING gist (int8range(lo_id, hi_id, '[]'));
ALTER TABLE lease_batches SET (autovacuum_vacuum_scale_factor = 0.02,
                               autovacuum_vacuum_insert_scale_factor = 0.02,
                               autovacuum_vacuum_cost_delay = 0);

-- The per-job picture: every deliveries row, and every batch job without a row of its own: SENT
-- (outcome recorded in the batch) or still leased under the batch. A batch job with a row of its
-- own (kept) is that row, and is gone with it once the row is pruned. Same columns as deliveries.
CREATE VIEW delivery_states AS
SELECT d.group_id, d.token_id, d.state, d.attempts, d.failures, d.lost_leases, d.owner, d.due_at,
       d.reason, d.cost_micros, d.updated_at, d.holder_left, d.recovery, d.provider_message_id,
       d.delivered_at, d.bounced_at, d.bounce_type, d.complained_at, d.rejected_at
  FROM deliveries d
UNION ALL
SELECT b.group_id, u.id,
       CASE WHEN u.bit = 1 THEN 'sent' ELSE 'leased' END::delivery_state,
       1, 0, 0,
       CASE WHEN u.bit = 0 THEN b.owner END,
       CASE WHEN u.bit = 0 THEN b.due_at END,
       NULL::TEXT, NULL::BIGINT, b.updated_at,
       b.holder_left AND u.bit = 0, b.recovery, NULL::TEXT,
       NULL::TIMESTAMPTZ, NULL::TIMESTAMPTZ, NULL::TEXT, NULL::TIMESTAMPTZ, NULL::TIMESTAMPTZ
  FROM lease_batches b
 CROSS JOIN LATERAL (SELECT x.id, get_bit(b.done, x.slot::INT - 1) AS bit,
                            get_bit(b.kept, x.slot::INT - 1) AS kept
                       FROM unnest(b.ids) WITH ORDINALITY AS x(id, slot)) u
 WHERE u.kept = 0 AND (u.bit = 1 OR b.state = 'leased');

-- p_n bits, those of p_slots (1-based, distinct) set: built once, in slot order, O(p_n).
CREATE FUNCTION mailroom_bits(p_n INT, p_slots INT[]) RETURNS VARBIT
    LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce((SELECT (string_agg(repeat('0', x.s - x.prev - 1) || '1', '' ORDER BY x.s)
                             || repeat('0', p_n - max(x.s)))::VARBIT
                       FROM (SELECT s, coalesce(lag(s) OVER (ORDER BY s), 0) AS prev
                               FROM unnest(p_slots) AS s) x),
                    repeat('0', p_n)::VARBIT);
$$;

-- The jobs among p_ids (with p_attempts: only those of attempt 1; NULL: any) that are in a batch
-- of group p_group leased to p_owner and have no outcome yet: their batch, slot (1-based), place
-- in p_ids (1-based) and the batch's recovery flag. Locks those batches (in batch_id order, so
-- that concurrent calls for one holder do not deadlock). The candidates are the holder's leased
-- batches whose id range meets p_ids' (lease_batches_owner_idx); the ids are matched by one hash
-- join, never a nested loop over ids x ids (hence the settings: the lateral unnest is the only
-- nested loop left). That nested loop, disabled yet the only plan, prices the statement far
-- above the JIT thresholds, and JIT would compile it on every call (~100 ms): JIT is off.
CREATE FUNCTION mailroom_batch_match(p_group INT, p_owner TEXT, p_ids BIGINT[], p_attempts INT[])
    RETURNS TABLE (batch_id BIGINT, slot INT, ord INT, recovery BOOLEAN)
    LANGUAGE plpgsql
    SET enable_seqscan = off SET enable_bitmapscan = off
    SET enable_nestloop = off SET enable_mergejoin = off SET jit = off
    AS $$
#variable_conflict use_column
DECLARE
    v_lo   BIGINT;
    v_hi   BIGINT;
    v_bids BIGINT[];
BEGIN
    SELECT min(u.id), max(u.id) INTO v_lo, v_hi
      FROM unnest(p_ids, p_attempts) AS u(id, att)
     WHERE u.att IS NULL OR u.att = 1;
    IF v_lo IS NULL THEN
        RETURN;
    END IF;
    SELECT array_agg(x.batch_id) INTO v_bids
      FROM (SELECT b.batch_id FROM lease_batches b
             WHERE b.owner = p_owner AND b.group_id = p_group AND b.state = 'leased'
               AND b.lo_id <= v_hi AND b.hi_id >= v_lo
             ORDER BY b.batch_id
               FOR UPDATE) x;
    IF v_bids IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT b.batch_id, s.slot::INT, u.ord::INT, b.recovery
      FROM lease_batches b
     CROSS JOIN LATERAL unnest(b.ids) WITH ORDINALITY AS s(id, slot)
      JOIN unnest(p_ids, p_attempts) WITH ORDINALITY AS u(id, att, ord) ON u.id = s.id
     WHERE b.batch_id = ANY (v_bids) AND (u.att IS NULL OR u.att = 1)
       AND get_bit(b.done, s.slot::INT - 1) = 0;
END;
$$;

-- Records the jobs at p_slots (1-based, each without an outcome, from mailroom_batch_match under
-- its lock) of the batches p_batches (parallel): their done bits are set, and their kept bits
-- where p_kept (the caller inserts their deliveries rows). One row update per batch; a batch whose
-- every job is recorded is done.
CREATE FUNCTION mailroom_batch_record(p_batches BIGINT[], p_slots INT[], p_kept BOOLEAN[])
    RETURNS VOID
    LANGUAGE plpgsql
    SET enable_seqscan = off SET enable_bitmapscan = off
    AS $$
DECLARE
    r RECORD;
BEGIN
    FOR r IN SELECT x.b, array_agg(x.s) AS slots, array_agg(x.s) FILTER (WHERE x.k) AS kept
               FROM unnest(p_batches, p_slots, p_kept) AS x(b, s, k) GROUP BY x.b
    LOOP
        UPDATE lease_batches b
           SET done = b.done | mailroom_bits(length(b.done), r.slots),
               kept = b.kept | mailroom_bits(length(b.done), r.kept),
               acked = b.acked + cardinality(r.slots),
               state = CASE WHEN b.acked + cardinality(r.slots) >= length(b.done) THEN 'done'
                            ELSE 'leased' END,
               updated_at = now()
         WHERE b.batch_id = r.b;
    END LOOP;
END;
$$;

-- Gives job p_id of group p_group, if it is in a leased batch without an outcome, its own
-- deliveries row as the batch leases it ('leased', the batch's owner, lease end and holder_left,
-- attempt 1; done and kept bits set), so that something can be recorded on the job before its
-- outcome: SES feedback that overtakes the acknowledgement. The acknowledgement then records the
-- outcome on that row (0020's path). Returns whether a row was made.
CREATE FUNCTION mailroom_batch_unpack(p_group INT, p_id BIGINT) RETURNS BOOLEAN
    LANGUAGE plpgsql
    SET enable_seqscan = off SET enable_bitmapscan = off
    AS $$
DECLARE
    b      RECORD;
    v_slot INT;
BEGIN
    FOR b IN SELECT x.batch_id, x.owner, x.due_at, x.holder_left, x.recovery, x.ids, x.done
               FROM lease_batches x
              WHERE int8range(x.lo_id, x.hi_id, '[]') @> p_id AND x.group_id = p_group
                AND x.state = 'leased'
                FOR UPDATE
    LOOP
        v_slot := array_position(b.ids, p_id);
        CONTINUE WHEN v_slot IS NULL OR get_bit(b.done, v_slot - 1) = 1;
        PERFORM mailroom_batch_record(ARRAY[b.batch_id], ARRAY[v_slot], ARRAY[true]);
        INSERT INTO deliveries (group_id, token_id, state, attempts, owner, due_at, holder_left,
                                recovery)
        VALUES (p_group, p_id, 'leased', 1, b.owner, b.due_at, b.holder_left, b.recovery);
        RETURN true;
    END LOOP;
    RETURN false;
END;
$$;

-- 0018's dequeue. New: step 0 (batches whose lease ran out), and the fresh path writes one
-- lease_batches row instead of a deliveries row per job.
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

        -- 0. Batches of this class whose lease ran out: their jobs without an outcome become
        --    per-job rows as their lease left them ('leased', the batch's owner, lease end and
        --    holder_left, attempt 1), due at once: step 1 hands them out again like any other
        --    lease that ran out (attempt 2, lost_leases + 1 unless the holder left). A batch an
        --    acknowledgement holds right now is skipped and taken at a later call.
        WITH x AS (
            SELECT b.batch_id FROM lease_batches b
             WHERE b.group_id = g.id AND b.state = 'leased' AND b.due_at <= now()
               AND b.recovery = v_rec
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
                    -- One lease row for the jobs of this window, one bit each.
                    INSERT INTO lease_batches (group_id, owner, recovery, due_at, ids, done,
                                               kept, lo_id, hi_id)
                    SELECT g.id, p_owner, v_rec, v_due, array_agg(r.id),
                           repeat('0', count(*)::INT)::VARBIT, repeat('0', count(*)::INT)::VARBIT,
                           min(r.id), max(r.id)
                      FROM r
                    HAVING count(*) > 0
                )
                SELECT r.id, r.action, r.email, r.login, r.secret, r.code, r.expires_at,
                       r.account, 1, 0, r.created_at, r.locale
                  FROM r;
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

-- 0020's acknowledgement, batch jobs first. A ninth argument, the SENT outcomes' provider
-- message ids ('' or NULL: none), tells which SENT outcomes keep a row and is stored on it (both
-- paths); 8-argument calls have none.
DROP FUNCTION mailroom_ack(TEXT, TEXT, BIGINT[], INT[], TEXT[], TEXT[], INT[], BIGINT[]);
CREATE FUNCTION mailroom_ack(p_group TEXT, p_owner TEXT, p_ids BIGINT[], p_attempts INT[],
                             p_outcomes TEXT[], p_reasons TEXT[], p_retry_ms INT[],
                             p_costs BIGINT[], p_message_ids TEXT[] DEFAULT NULL)
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
    v_mid  TEXT[];
    v_mb   BIGINT[];
    v_slot INT[];
    v_ord  INT[];
    v_rec  BOOLEAN[];
    v_kept BOOLEAN[];
    v_plain BIGINT;
    v_sent BIGINT;
    v_sum  BIGINT;
    v_tids TID[];
    v_done BIGINT[];
BEGIN
    SELECT id INTO gid FROM consumer_groups WHERE name = p_group;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown consumer group "%"', p_group USING ERRCODE = 'no_data_found';
    END IF;
    -- One outcome per id, as 0003's DISTINCT ON.
    SELECT array_agg(u.id), array_agg(u.attempt), array_agg(u.outcome), array_agg(u.reason),
           array_agg(u.retry_ms), array_agg(u.cost), array_agg(u.mid)
      INTO v_ids, v_att, v_out, v_rsn, v_ms, v_cost, v_mid
      FROM (SELECT DISTINCT ON (u.id) *
              FROM unnest(p_ids, p_attempts, p_outcomes, p_reasons, p_retry_ms, p_costs,
                          p_message_ids)
                       AS u(id, attempt, outcome, reason, retry_ms, cost, mid)
             ORDER BY u.id) u;
    IF v_ids IS NULL THEN
        RETURN;
    END IF;

    -- 1. Jobs in a batch leased to p_owner (attempt 1, no outcome yet), the batches locked.
    SELECT array_agg(m.batch_id), array_agg(m.slot), array_agg(m.ord), array_agg(m.recovery),
           array_agg(v_out[m.ord] <> 'sent' OR coalesce(v_mid[m.ord], '') <> '')
      INTO v_mb, v_slot, v_ord, v_rec, v_kept
      FROM mailroom_batch_match(gid, p_owner, v_ids, v_att) m;
    IF v_mb IS NOT NULL THEN
        PERFORM mailroom_batch_record(v_mb, v_slot, v_kept);
        -- Every outcome but a plain SENT keeps its per-job row (bit set above, same
        -- transaction): the states, failures, reasons, costs and lease ends 0020 writes.
        INSERT INTO deliveries (group_id, token_id, state, attempts, failures, reason,
                                cost_micros, due_at, provider_message_id, recovery, updated_at)
        SELECT gid, v_ids[m.o],
               CASE WHEN v_out[m.o] IN ('retry', 'defer') THEN 'retry'
                    ELSE v_out[m.o] END::delivery_state,
               1, (v_out[m.o] = 'retry')::INT, NULLIF(left(v_rsn[m.o], 1000), ''),
               CASE WHEN v_out[m.o] = 'sent' THEN v_cost[m.o] END,
               CASE WHEN v_out[m.o] IN ('retry', 'defer')
                    THEN now() + make_interval(secs => v_ms[m.o] / 1000.0) END,
               NULLIF(v_mid[m.o], ''), m.r, now()
          FROM unnest(v_ord, v_rec) AS m(o, r)
         WHERE v_out[m.o] <> 'sent' OR coalesce(v_mid[m.o], '') <> '';
        -- Plain SENT outcomes have no row: counted here (a row's outcome is counted by 0013's
        -- trigger); the costs of all SENT outcomes go to group_usage as before.
        SELECT count(*) FILTER (WHERE v_out[o] = 'sent' AND coalesce(v_mid[o], '') = ''),
               count(*) FILTER (WHERE v_out[o] = 'sent'),
               coalesce(sum(v_cost[o]) FILTER (WHERE v_out[o] = 'sent'), 0)
          INTO v_plain, v_sent, v_sum
          FROM unnest(v_ord) AS o;
        IF v_plain > 0 THEN
            INSERT INTO delivery_counts (group_id, state, n) VALUES (gid, 'sent', v_plain);
        END IF;
        IF v_sent > 0 THEN
            INSERT INTO group_usage AS g (group_id, month, sent, cost_micros)
            VALUES (gid, date_trunc('month', now() AT TIME ZONE 'UTC')::DATE, v_sent, v_sum)
            ON CONFLICT (group_id, month) DO UPDATE
               SET sent = g.sent + EXCLUDED.sent,
                   cost_micros = g.cost_micros + EXCLUDED.cost_micros;
        END IF;
        RETURN QUERY SELECT v_ids[o] FROM unnest(v_ord) AS o;
        IF cardinality(v_ord) = cardinality(v_ids) THEN
            RETURN;
        END IF;
        -- The others go the per-job way below.
        SELECT array_agg(v_ids[l]), array_agg(v_att[l]), array_agg(v_out[l]), array_agg(v_rsn[l]),
               array_agg(v_ms[l]), array_agg(v_cost[l]), array_agg(v_mid[l])
          INTO v_ids, v_att, v_out, v_rsn, v_ms, v_cost, v_mid
          FROM (SELECT generate_series(1, cardinality(v_ids)) EXCEPT ALL SELECT unnest(v_ord)) x(l);
    END IF;

    -- 2. Jobs with a deliveries row (0020's per-job path; it now stores the SENT outcomes'
    --    message ids too, as the batch path does, instead of mailroom_record_sent's second
    --    update of the same rows).
    WHILE v_ids IS NOT NULL LOOP
        SELECT array_agg(d.ctid), array_agg(u.id), array_agg(u.attempt), array_agg(u.outcome),
               array_agg(u.reason), array_agg(u.retry_ms), array_agg(u.cost), array_agg(u.mid)
          INTO v_tids, v_ids, v_att, v_out, v_rsn, v_ms, v_cost, v_mid
          FROM unnest(v_ids, v_att, v_out, v_rsn, v_ms, v_cost, v_mid)
                   AS u(id, attempt, outcome, reason, retry_ms, cost, mid)
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
                   provider_message_id = CASE WHEN u.outcome = 'sent'
                                              THEN coalesce(NULLIF(u.mid, ''),
                                                            d.provider_message_id)
                                              ELSE d.provider_message_id END,
                   owner = NULL,
                   holder_left = false,
                   due_at = CASE WHEN u.outcome IN ('retry', 'defer')
                                 THEN now() + make_interval(secs => u.retry_ms / 1000.0) END,
                   updated_at = now()
              FROM unnest(v_tids, v_ids, v_att, v_out, v_rsn, v_ms, v_cost, v_mid)
                       AS u(tid, id, attempt, outcome, reason, retry_ms, cost, mid)
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
               array_agg(u.retry_ms), array_agg(u.cost), array_agg(u.mid)
          INTO v_ids, v_att, v_out, v_rsn, v_ms, v_cost, v_mid
          FROM unnest(v_ids, v_att, v_out, v_rsn, v_ms, v_cost, v_mid)
                   AS u(id, attempt, outcome, reason, retry_ms, cost, mid)
          LEFT JOIN unnest(v_done) AS x(id) ON x.id = u.id
         WHERE x.id IS NULL;
    END LOOP;
END;
$$;

-- 0020's renewal, batch jobs first.
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
    v_bids BIGINT[];
    v_ord  INT[];
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
    IF v_ids IS NULL THEN
        RETURN;
    END IF;
    -- 1. Batch jobs: their batch's lease is renewed (all its jobs share one lease end).
    SELECT array_agg(DISTINCT m.batch_id), array_agg(m.ord) INTO v_bids, v_ord
      FROM mailroom_batch_match(gid, p_owner, v_ids, v_att) m;
    IF v_bids IS NOT NULL THEN
        UPDATE lease_batches b
           SET due_at = now() + make_interval(secs => p_lease_ms / 1000.0), holder_left = false
         WHERE b.batch_id = ANY (v_bids);
        RETURN QUERY SELECT v_ids[o] FROM unnest(v_ord) AS o;
        IF cardinality(v_ord) = cardinality(v_ids) THEN
            RETURN;
        END IF;
        SELECT array_agg(v_ids[l]), array_agg(v_att[l]) INTO v_ids, v_att
          FROM (SELECT generate_series(1, cardinality(v_ids)) EXCEPT ALL SELECT unnest(v_ord)) x(l);
    END IF;
    -- 2. Jobs with a deliveries row (0020's).
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

-- 0003's, for batches too.
CREATE OR REPLACE FUNCTION mailroom_holder_left(p_group TEXT, p_owner TEXT) RETURNS VOID
    LANGUAGE sql AS $$
    UPDATE deliveries d SET holder_left = true
      FROM consumer_groups g
     WHERE g.name = p_group AND d.group_id = g.id AND d.owner = p_owner AND d.state = 'leased';
    UPDATE lease_batches b SET holder_left = true
      FROM consumer_groups g
     WHERE g.name = p_group AND b.group_id = g.id AND b.owner = p_owner AND b.state = 'leased';
$$;

-- Makes the leases p_owner holds on p_ids due now without counting them as lost (jobs that never
-- reached the subscriber; what the collector's Release did in one UPDATE of deliveries). A batch
-- job gets its per-job row as it would at expiry, due now, holder_left, its bit set. Returns how
-- many jobs were released.
CREATE FUNCTION mailroom_release(p_group TEXT, p_owner TEXT, p_ids BIGINT[]) RETURNS INT
    LANGUAGE plpgsql
    SET enable_seqscan = off SET enable_bitmapscan = off
    AS $$
DECLARE
    gid    INT;
    v_ids  BIGINT[];
    v_n    INT;
    v_mb   BIGINT[];
    v_slot INT[];
    v_ord  INT[];
    v_rec  BOOLEAN[];
BEGIN
    SELECT id INTO gid FROM consumer_groups WHERE name = p_group;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    SELECT array_agg(DISTINCT u.id) INTO v_ids FROM unnest(p_ids) AS u(id);
    IF v_ids IS NULL THEN
        RETURN 0;
    END IF;
    UPDATE deliveries d SET due_at = now(), holder_left = true
     WHERE d.group_id = gid AND d.owner = p_owner AND d.token_id = ANY (v_ids)
       AND d.state = 'leased';
    GET DIAGNOSTICS v_n = ROW_COUNT;
    SELECT array_agg(m.batch_id), array_agg(m.slot), array_agg(m.ord), array_agg(m.recovery)
      INTO v_mb, v_slot, v_ord, v_rec
      FROM mailroom_batch_match(gid, p_owner, v_ids, NULL) m;
    IF v_mb IS NOT NULL THEN
        PERFORM mailroom_batch_record(v_mb, v_slot, array_fill(true, ARRAY[cardinality(v_slot)]));
        INSERT INTO deliveries (group_id, token_id, state, attempts, owner, due_at, holder_left,
                                recovery)
        SELECT gid, v_ids[m.o], 'leased', 1, p_owner, now(), true, m.r
          FROM unnest(v_ord, v_rec) AS m(o, r);
        v_n := v_n + cardinality(v_ord);
    END IF;
    RETURN v_n;
END;
$$;

-- 0013's statistics; in flight counts the batch jobs without an outcome too.
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
           f.in_flight + fb.in_flight, f.waiting_retry, c.sent, c.failed, c.expired, c.cancelled,
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

-- 0019's refund pass: a live batch lease holds a refund back as a live job lease does.
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
        CONTINUE WHEN EXISTS (SELECT 1 FROM budget_subscriptions s
                                JOIN lease_batches b ON b.owner = s.owner
                                                    AND b.group_id = s.group_id
                               WHERE s.group_id = h.group_id AND s.holder = h.holder
                                 AND b.state = 'leased' AND b.due_at > now());
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

-- 0019's: a subscription whose owner holds a batch lease is kept too.
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
           AND NOT EXISTS (SELECT 1 FROM lease_batches b
                            WHERE b.owner = s.owner AND b.state = 'leased'
                              AND b.group_id = s.group_id)
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

-- 0013's token pruning; a token in a lease batch is kept until the batch is pruned.
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
               -- A token outlives its batch as it outlives its deliveries rows.
               AND NOT EXISTS (SELECT 1 FROM lease_batches b
                                WHERE int8range(b.lo_id, b.hi_id, '[]') @> t.id
                                  AND t.id = ANY (b.ids))
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

-- 0012's feedback: an event for a job still leased in a batch finds it by its tags.
CREATE OR REPLACE FUNCTION mailroom_record_feedback(p_sns_id TEXT, p_event TEXT, p_ses_message_id TEXT,
                                         p_group TEXT, p_job_id BIGINT, p_recipients TEXT[],
                                         p_bounce_type TEXT, p_detail TEXT, p_soft_limit INT)
    RETURNS TEXT
    LANGUAGE plpgsql AS $$
DECLARE
    v_gid   INT;
    v_tid   BIGINT;
    v_bg    INT;
    v_first BOOLEAN := FALSE;
    v_addr  TEXT;
    v_soft  TEXT[] := '{}';
BEGIN
    INSERT INTO sns_messages (message_id, type) VALUES (p_sns_id, p_event)
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RETURN 'duplicate';
    END IF;
    -- What expired since the last call: an index range, usually empty.
    DELETE FROM sns_messages WHERE received_at < now() - interval '30 days';

    IF p_ses_message_id <> '' THEN
        SELECT d.group_id, d.token_id INTO v_gid, v_tid FROM deliveries d
         WHERE d.provider_message_id = p_ses_message_id
         LIMIT 1;
    END IF;
    IF v_gid IS NULL AND p_group <> '' AND p_job_id > 0 THEN
        SELECT d.group_id, d.token_id INTO v_gid, v_tid
          FROM deliveries d JOIN consumer_groups g ON g.id = d.group_id
         WHERE g.name = p_group AND d.token_id = p_job_id;
        -- A job still leased in a batch has no row of its own yet: it gets one (0021).
        IF v_gid IS NULL THEN
            SELECT g.id INTO v_bg FROM consumer_groups g WHERE g.name = p_group;
            IF v_bg IS NOT NULL AND mailroom_batch_unpack(v_bg, p_job_id) THEN
                v_gid := v_bg;
                v_tid := p_job_id;
            END IF;
        END IF;
    END IF;

    IF v_gid IS NOT NULL THEN
        -- Each kind of event counts once per delivery (SES may report a delivery twice).
        IF p_event = 'Delivery' THEN
            UPDATE deliveries SET delivered_at = now()
             WHERE group_id = v_gid AND token_id = v_tid AND delivered_at IS NULL;
            v_first := FOUND;
            IF v_first THEN PERFORM mailroom_reputation_add(v_gid, 0, 1, 0, 0); END IF;
        ELSIF p_event = 'Bounce' AND p_bounce_type = 'Permanent' THEN
            UPDATE deliveries SET bounced_at = now(), bounce_type = p_bounce_type
             WHERE group_id = v_gid AND token_id = v_tid AND bounced_at IS NULL;
            v_first := FOUND;
            IF v_first THEN PERFORM mailroom_reputation_add(v_gid, 0, 0, 1, 0); END IF;
        ELSIF p_event = 'Bounce' THEN
            UPDATE deliveries SET bounce_type = p_bounce_type
             WHERE group_id = v_gid AND token_id = v_tid AND bounced_at IS NULL;
        ELSIF p_event = 'Complaint' THEN
            UPDATE deliveries SET complained_at = now()
             WHERE group_id = v_gid AND token_id = v_tid AND complained_at IS NULL;
            v_first := FOUND;
            IF v_first THEN PERFORM mailroom_reputation_add(v_gid, 0, 0, 0, 1); END IF;
        ELSIF p_event = 'Reject' THEN
            UPDATE deliveries SET rejected_at = now()
             WHERE group_id = v_gid AND token_id = v_tid AND rejected_at IS NULL;
        END IF;
    END IF;

    IF p_event = 'Bounce' AND p_bounce_type = 'Permanent' THEN
        PERFORM mailroom_suppress_addresses(p_recipients, 'hard_bounce',
                                            'ses bounce: Permanent ' || p_detail);
    ELSIF p_event = 'Bounce' AND p_bounce_type = 'Transient' THEN
        DELETE FROM soft_bounces b
         WHERE b.address IN (SELECT lower(trim(a)) FROM unnest(p_recipients) a)
           AND b.bounced_at <= now() - interval '7 days';
        INSERT INTO soft_bounces (address)
        SELECT DISTINCT lower(trim(a)) FROM unnest(p_recipients) a WHERE trim(a) <> '';
        FOREACH v_addr IN ARRAY p_recipients LOOP
            IF (SELECT count(*) FROM soft_bounces b
                 WHERE b.address = lower(trim(v_addr))
                   AND b.bounced_at > now() - interval '7 days') >= p_soft_limit THEN
                v_soft := v_soft || v_addr;
            END IF;
        END LOOP;
        IF array_length(v_soft, 1) > 0 THEN
            PERFORM mailroom_suppress_addresses(
                v_soft, 'hard_bounce',
                format('ses bounce: %s transient bounces within 7 days %s', p_soft_limit, p_detail));
        END IF;
    ELSIF p_event = 'Complaint' THEN
        PERFORM mailroom_suppress_addresses(p_recipients, 'complaint', 'ses complaint ' || p_detail);
    END IF;

    RETURN CASE WHEN v_gid IS NULL THEN 'unmatched' ELSE 'recorded' END;
END;
$$;

-- Deletes, among the next p_batch lease batches after p_after, the finished ones ('done' or
-- 'expired') last updated before p_before. Returns as mailroom_prune_deliveries (0013). A
-- finished batch's SENT jobs have no other record: they go with it, as a pruned SENT row does
-- (delivery_counts keeps counting them).
CREATE FUNCTION mailroom_prune_lease_batches(p_after BIGINT, p_before TIMESTAMPTZ, p_batch INT)
    RETURNS TABLE (pruned BIGINT, last_id BIGINT, more BOOLEAN)
    LANGUAGE plpgsql
    SET enable_seqscan = off SET enable_bitmapscan = off
    AS $$
DECLARE
    v_ids    BIGINT[];
    v_seen   INT;
    v_last   BIGINT;
    v_newest TIMESTAMPTZ;
    v_n      BIGINT;
BEGIN
    SELECT array_agg(w.batch_id) FILTER (WHERE w.state <> 'leased' AND w.updated_at < p_before),
           count(*), max(w.batch_id), max(w.updated_at)
      INTO v_ids, v_seen, v_last, v_newest
      FROM (SELECT b.batch_id, b.state, b.updated_at FROM lease_batches b
             WHERE b.batch_id > p_after ORDER BY b.batch_id LIMIT p_batch) w;
    v_n := 0;
    IF v_ids IS NOT NULL THEN
        WITH victims AS (
            SELECT b.batch_id FROM lease_batches b
             WHERE b.batch_id = ANY (v_ids) AND b.state <> 'leased' AND b.updated_at < p_before
               FOR UPDATE SKIP LOCKED
        ), del AS (
            DELETE FROM lease_batches b USING victims v WHERE b.batch_id = v.batch_id
            RETURNING 1
        )
        SELECT count(*) INTO v_n FROM del;
    END IF;
    RETURN QUERY SELECT v_n, coalesce(v_last, p_after),
                        v_seen = p_batch AND (v_n > 0 OR v_newest < p_before);
END;
$$;
