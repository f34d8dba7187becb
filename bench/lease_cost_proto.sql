-- A PROTOTYPE of batch leases (PgQ's design), in the scratch schema
-- lease_proto of bench/lease_cost.sh's throwaway database. It is not a migration and nothing in
-- the services calls it: it exists to measure what a batch lease costs next to today's per-job
-- delivery rows. Loaded after bench/lease_cost.sql (it reuses lease_cost.window_read, the
-- dequeue's token window read).
--
-- One lease row per handed-out batch (group, holder, attempt, due_at, the job ids, a bit per job
-- recorded, the count recorded). An acknowledgement of the whole batch as SENT is one row update,
-- fenced by holder and attempt like mailroom_ack; a partial acknowledgement sets the reported
-- jobs' bits; only exceptions (retry, failure, expiry, tokens not to send) get a per-job row.
-- Counters are written per acknowledgement as today (group_usage, reputation_hourly,
-- delivery_counts), one row each, not per job.
-- Not prototyped (not timed): handing out exception rows again when due, re-leasing a batch
-- whose lease ran out (one row update: attempt + 1, new holder), pruning.

CREATE SCHEMA lease_proto;

-- A group's activations cursor (the same four columns as a row of group_cursors).
CREATE TABLE lease_proto.cursors (
    group_id      INT PRIMARY KEY,
    prev_snapshot PG_SNAPSHOT NOT NULL,
    cur_snapshot  PG_SNAPSHOT,
    pos_txid      XID8,
    pos_id        BIGINT
);

CREATE TABLE lease_proto.batches (
    batch_id   BIGSERIAL PRIMARY KEY,
    group_id   INT NOT NULL,
    holder     TEXT NOT NULL,              -- member holding the lease (fencing)
    attempt    INT NOT NULL DEFAULT 1,     -- times handed out (fencing)
    state      TEXT NOT NULL DEFAULT 'leased' CHECK (state IN ('leased', 'done')),
    due_at     TIMESTAMPTZ,
    n          INT NOT NULL,
    ids        BIGINT[] NOT NULL,          -- the jobs, in hand-out order
    done       BIT VARYING,                -- bit k: outcome of ids[k+1] recorded (NULL: none)
    acked      INT NOT NULL DEFAULT 0,     -- outcomes recorded
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX batches_due_idx ON lease_proto.batches (group_id, due_at) WHERE state = 'leased';

-- Per-job rows for exceptions only.
CREATE TABLE lease_proto.exceptions (
    group_id   INT NOT NULL,
    token_id   BIGINT NOT NULL,
    batch_id   BIGINT,                     -- NULL: skipped at dequeue, never handed out
    state      delivery_state NOT NULL,
    failures   INT NOT NULL DEFAULT 0,
    reason     TEXT,
    due_at     TIMESTAMPTZ,
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (group_id, token_id)
);
CREATE INDEX exceptions_due_idx ON lease_proto.exceptions (group_id, due_at) WHERE state = 'retry';

CREATE FUNCTION lease_proto.start_group(p_group TEXT) RETURNS INT
    LANGUAGE plpgsql AS $$
DECLARE
    v_gid INT;
BEGIN
    PERFORM mailroom_ensure_group(p_group, true);
    INSERT INTO lease_proto.cursors (group_id, prev_snapshot)
    SELECT g.id, c.prev_snapshot
      FROM consumer_groups g JOIN group_cursors c ON c.group_id = g.id AND c.priority = 'normal'
     WHERE g.name = p_group
    RETURNING group_id INTO v_gid;
    RETURN v_gid;
END;
$$;

-- Hands out up to p_limit new activations as one batch lease; returns its jobs (the same columns
-- as mailroom_dequeue, plus the batch id).
CREATE FUNCTION lease_proto.dequeue(p_group_id INT, p_limit INT, p_holder TEXT, p_lease_ms INT)
    RETURNS TABLE (batch_id BIGINT, job_id BIGINT, action token_action, email TEXT, login TEXT,
                   secret BYTEA, code TEXT, expires_at BIGINT, account_id BIGINT, attempt INT,
                   failures INT, created_at BIGINT, locale TEXT)
    LANGUAGE plpgsql
    SET enable_seqscan = off SET enable_bitmapscan = off SET enable_sort = off
    AS $$
#variable_conflict use_column
DECLARE
    c       lease_proto.cursors%ROWTYPE;
    w       RECORD;
    v_n     INT;
    v_send  BIGINT[];
    v_batch BIGINT;
BEGIN
    SELECT * INTO c FROM lease_proto.cursors WHERE group_id = p_group_id FOR UPDATE;
    IF c.cur_snapshot IS NULL THEN
        c.cur_snapshot := pg_current_snapshot();
        c.pos_txid := pg_snapshot_xmin(c.prev_snapshot);
        c.pos_id := 0;
    END IF;
    SELECT * INTO w FROM lease_cost.window_read('activation', c.pos_txid, c.pos_id,
                                                c.cur_snapshot, c.prev_snapshot, p_limit);
    v_n := coalesce(cardinality(w.ids), 0);
    IF v_n < p_limit THEN
        c.prev_snapshot := c.cur_snapshot;
        c.cur_snapshot := NULL; c.pos_txid := NULL; c.pos_id := NULL;
    ELSE
        c.pos_txid := w.txids[v_n]; c.pos_id := w.ids[v_n];
    END IF;
    UPDATE lease_proto.cursors
       SET prev_snapshot = c.prev_snapshot, cur_snapshot = c.cur_snapshot,
           pos_txid = c.pos_txid, pos_id = c.pos_id
     WHERE group_id = p_group_id;
    IF v_n = 0 THEN
        RETURN;
    END IF;
    IF false = ANY (w.ok) THEN
        INSERT INTO lease_proto.exceptions (group_id, token_id, state, reason)
        SELECT p_group_id, x.id,
               (CASE WHEN x.why IN ('expired', 'superseded', 'rate_limited', 'suppressed')
                     THEN x.why ELSE 'cancelled' END)::delivery_state,
               coalesce(x.reason, x.why)
          FROM unnest(w.ids, w.skip, w.reasons) AS x(id, why, reason)
         WHERE x.why IS NOT NULL
        ON CONFLICT DO NOTHING;
    END IF;
    SELECT array_agg(x.id) INTO v_send FROM unnest(w.ids, w.ok) AS x(id, ok) WHERE x.ok;
    IF v_send IS NULL THEN
        RETURN;
    END IF;
    INSERT INTO lease_proto.batches AS b (group_id, holder, due_at, n, ids)
    VALUES (p_group_id, p_holder, now() + make_interval(secs => p_lease_ms / 1000.0),
            cardinality(v_send), v_send)
    RETURNING b.batch_id INTO v_batch;
    RETURN QUERY
    SELECT v_batch, r.id, r.action, r.email, r.login, r.secret, r.code, r.expires_at, r.account,
           1, 0, r.created_at, r.locale
      FROM unnest(w.ids, w.actions, w.emails, w.logins, w.secrets, w.codes, w.expires,
                  w.accounts, w.created, w.ok, w.locales)
               AS r(id, action, email, login, secret, code, expires_at, account, created_at, ok,
                    locale)
     WHERE r.ok;
END;
$$;

-- The per-acknowledgement counters (what mailroom_ack's group_usage upsert, 0013's count trigger
-- and mailroom_record_sent write today), one row each.
CREATE FUNCTION lease_proto.count_outcomes(p_group_id INT, p_sent INT, p_cost BIGINT,
                                           p_failed INT, p_expired INT)
    RETURNS VOID
    LANGUAGE plpgsql AS $$
BEGIN
    IF p_sent > 0 THEN
        INSERT INTO group_usage AS g (group_id, month, sent, cost_micros)
        VALUES (p_group_id, date_trunc('month', now() AT TIME ZONE 'UTC')::DATE, p_sent, p_cost)
        ON CONFLICT (group_id, month) DO UPDATE
           SET sent = g.sent + EXCLUDED.sent, cost_micros = g.cost_micros + EXCLUDED.cost_micros;
        PERFORM mailroom_reputation_add(p_group_id, p_sent, 0, 0, 0);
    END IF;
    INSERT INTO delivery_counts (group_id, state, n)
    SELECT p_group_id, s.state, s.n
      FROM (VALUES ('sent'::delivery_state, p_sent), ('failed', p_failed), ('expired', p_expired))
               AS s(state, n)
     WHERE s.n > 0;
END;
$$;

-- The whole batch acknowledged as SENT: one row update, fenced by holder and attempt, and only
-- when no job of the batch has an outcome yet and p_ids is the batch. Returns the jobs recorded
-- (0: a stale or partial report, nothing changed).
CREATE FUNCTION lease_proto.ack_batch(p_group_id INT, p_holder TEXT, p_batch_id BIGINT,
                                      p_attempt INT, p_ids BIGINT[], p_cost BIGINT)
    RETURNS INT
    LANGUAGE plpgsql AS $$
DECLARE
    v_n INT;
BEGIN
    UPDATE lease_proto.batches b
       SET state = 'done', acked = b.n, due_at = NULL, updated_at = now()
     WHERE b.batch_id = p_batch_id AND b.group_id = p_group_id AND b.state = 'leased'
       AND b.holder = p_holder AND b.attempt = p_attempt AND b.done IS NULL AND b.ids = p_ids
    RETURNING b.n INTO v_n;
    IF v_n IS NULL THEN
        RETURN 0;
    END IF;
    PERFORM lease_proto.count_outcomes(p_group_id, v_n, p_cost, 0, 0);
    RETURN v_n;
END;
$$;

-- Outcomes of some jobs of a batch (any mix of sent, failed, expired, retry, defer), fenced like
-- ack_batch. Jobs already recorded, or not in the batch, are ignored. Non-SENT outcomes get an
-- exception row. Returns the ids recorded.
CREATE FUNCTION lease_proto.ack_jobs(p_group_id INT, p_holder TEXT, p_batch_id BIGINT,
                                     p_attempt INT, p_ids BIGINT[], p_outcomes TEXT[],
                                     p_reasons TEXT[], p_retry_ms INT[])
    RETURNS SETOF BIGINT
    LANGUAGE plpgsql AS $$
DECLARE
    b        lease_proto.batches%ROWTYPE;
    v_ids    BIGINT[];
    v_pos    INT[];
    v_outs   TEXT[];
    v_reasons TEXT[];
    v_retry  INT[];
    v_mask   BIT VARYING;
    v_sent   INT;
    v_failed INT;
    v_exp    INT;
    k        INT;
BEGIN
    SELECT * INTO b FROM lease_proto.batches x
     WHERE x.batch_id = p_batch_id AND x.group_id = p_group_id AND x.state = 'leased'
       AND x.holder = p_holder AND x.attempt = p_attempt
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    v_mask := coalesce(b.done, repeat('0', b.n)::BIT VARYING);
    -- The reported jobs of this batch not recorded yet (the first report of an id wins).
    SELECT array_agg(a.id), array_agg(a.pos), array_agg(a.outcome), array_agg(a.reason),
           array_agg(a.retry_ms),
           count(*) FILTER (WHERE a.outcome = 'sent'),
           count(*) FILTER (WHERE a.outcome = 'failed'),
           count(*) FILTER (WHERE a.outcome = 'expired')
      INTO v_ids, v_pos, v_outs, v_reasons, v_retry, v_sent, v_failed, v_exp
      FROM (SELECT DISTINCT ON (u.id) u.id, p.ord::INT AS pos, u.outcome, u.reason, u.retry_ms
              FROM unnest(p_ids, p_outcomes, p_reasons, p_retry_ms) WITH ORDINALITY
                       AS u(id, outcome, reason, retry_ms, i)
              JOIN unnest(b.ids) WITH ORDINALITY AS p(id, ord) ON p.id = u.id
             WHERE get_bit(v_mask, (p.ord - 1)::INT) = 0
             ORDER BY u.id, u.i) a;
    IF v_ids IS NULL THEN
        RETURN;
    END IF;
    FOREACH k IN ARRAY v_pos LOOP
        v_mask := set_bit(v_mask, k - 1, 1);
    END LOOP;
    INSERT INTO lease_proto.exceptions AS e (group_id, token_id, batch_id, state, failures,
                                             reason, due_at)
    SELECT p_group_id, a.id, b.batch_id,
           (CASE WHEN a.outcome IN ('retry', 'defer') THEN 'retry'
                 ELSE a.outcome END)::delivery_state,
           (a.outcome = 'retry')::INT, NULLIF(left(a.reason, 1000), ''),
           CASE WHEN a.outcome IN ('retry', 'defer')
                THEN now() + make_interval(secs => a.retry_ms / 1000.0) END
      FROM unnest(v_ids, v_outs, v_reasons, v_retry) AS a(id, outcome, reason, retry_ms)
     WHERE a.outcome <> 'sent'
    ON CONFLICT (group_id, token_id) DO UPDATE
       SET batch_id = EXCLUDED.batch_id, state = EXCLUDED.state,
           failures = e.failures + EXCLUDED.failures, reason = EXCLUDED.reason,
           due_at = EXCLUDED.due_at, updated_at = now();
    UPDATE lease_proto.batches x
       SET done = v_mask, acked = x.acked + cardinality(v_ids),
           state = CASE WHEN x.acked + cardinality(v_ids) = x.n THEN 'done' ELSE 'leased' END,
           due_at = CASE WHEN x.acked + cardinality(v_ids) = x.n THEN NULL ELSE x.due_at END,
           updated_at = now()
     WHERE x.batch_id = b.batch_id;
    PERFORM lease_proto.count_outcomes(p_group_id, v_sent, 0, v_failed, v_exp);
    RETURN QUERY SELECT unnest(v_ids);
END;
$$;

-- The prototype's drain, timed like lease_cost.current_path. p_mode:
--   'full'       one ack_batch of the 1000 jobs as SENT, committed;
--   'partial'    five ack_jobs of 200 SENT each, each committed (the 5 summed per batch);
--   'exceptions' one ack_jobs of 990 SENT and 10 RETRY (10 exception rows), committed.
-- Checks afterwards that every batch is done and every job recorded exactly once.
CREATE PROCEDURE lease_cost.proto_path(p_run TEXT, p_group TEXT, p_batches INT, p_mode TEXT)
    LANGUAGE plpgsql AS $$
DECLARE
    v_gid   INT;
    v_batch BIGINT;
    v_ids   BIGINT[];
    v_out   TEXT[];
    n       INT;
    v_rec   INT;
    v_ack   FLOAT8;
    v_com   FLOAT8;
    v_done  BIGINT;
    v_open  BIGINT;
    v_exc   BIGINT;
    t       TIMESTAMPTZ[];
    res     lease_cost.timings[] := '{}';
    ack_step TEXT := CASE p_mode
        WHEN 'full' THEN 'ack_batch (1000 SENT: one row update)'
        WHEN 'partial' THEN 'ack_jobs, 5 x 200 SENT (sum of 5)'
        ELSE 'ack_jobs, 990 SENT + 10 RETRY (10 exception rows)' END;
    com_step TEXT := CASE p_mode
        WHEN 'partial' THEN 'commits of the 5 acknowledgements (sum)'
        ELSE 'commit (acknowledgement)' END;
BEGIN
    v_gid := lease_proto.start_group(p_group);
    COMMIT;
    FOR i IN 1..p_batches LOOP
        PERFORM set_config('synchronous_commit', 'off', true);
        t[0] := clock_timestamp();
        SELECT min(d.batch_id), array_agg(d.job_id) INTO v_batch, v_ids
          FROM lease_proto.dequeue(v_gid, 1000, 'bench-1', 60000) d;
        t[1] := clock_timestamp();
        COMMIT;
        t[2] := clock_timestamp();
        n := coalesce(cardinality(v_ids), 0);
        EXIT WHEN n = 0;
        v_ack := 0; v_com := 0; v_rec := 0;
        IF p_mode = 'full' THEN
            v_rec := lease_proto.ack_batch(v_gid, 'bench-1', v_batch, 1, v_ids, 0);
            t[3] := clock_timestamp();
            COMMIT;
            t[4] := clock_timestamp();
            v_ack := lease_cost.ms(t[2], t[3]); v_com := lease_cost.ms(t[3], t[4]);
        ELSIF p_mode = 'partial' THEN
            FOR k IN 0..4 LOOP
                t[3] := clock_timestamp();
                v_rec := v_rec + (SELECT count(*) FROM lease_proto.ack_jobs(
                    v_gid, 'bench-1', v_batch, 1, v_ids[k * 200 + 1 : k * 200 + 200],
                    array_fill('sent'::TEXT, ARRAY[200]), array_fill(''::TEXT, ARRAY[200]),
                    array_fill(0, ARRAY[200])));
                t[4] := clock_timestamp();
                COMMIT;
                t[5] := clock_timestamp();
                v_ack := v_ack + lease_cost.ms(t[3], t[4]);
                v_com := v_com + lease_cost.ms(t[4], t[5]);
            END LOOP;
            t[4] := t[5];
        ELSE
            SELECT array_agg(CASE WHEN k % 100 = 0 THEN 'retry' ELSE 'sent' END ORDER BY k)
              INTO v_out FROM generate_series(1, n) k;
            v_rec := (SELECT count(*) FROM lease_proto.ack_jobs(
                v_gid, 'bench-1', v_batch, 1, v_ids, v_out,
                array_fill('451 try later'::TEXT, ARRAY[n]), array_fill(60000, ARRAY[n])));
            t[3] := clock_timestamp();
            COMMIT;
            t[4] := clock_timestamp();
            v_ack := lease_cost.ms(t[2], t[3]); v_com := lease_cost.ms(t[3], t[4]);
        END IF;
        IF v_rec <> n THEN
            RAISE EXCEPTION 'batch %: % of % outcomes recorded', i, v_rec, n;
        END IF;
        res := res || ARRAY[
            (p_run, 'lease_proto.dequeue (1 lease row)', i, n, lease_cost.ms(t[0], t[1])),
            (p_run, 'commit (dequeue, synchronous_commit off)', i, n, lease_cost.ms(t[1], t[2])),
            (p_run, ack_step, i, n, v_ack),
            (p_run, com_step, i, n, v_com),
            (p_run, 'TOTAL dequeue+ack+commits', i, n, lease_cost.ms(t[0], t[4]))
        ]::lease_cost.timings[];
    END LOOP;
    SELECT coalesce(sum(acked), 0), count(*) FILTER (WHERE state <> 'done')
      INTO v_done, v_open FROM lease_proto.batches WHERE group_id = v_gid;
    SELECT count(*) INTO v_exc FROM lease_proto.exceptions WHERE group_id = v_gid;
    IF v_done <> (SELECT count(*) FROM tokens) OR v_open <> 0
       OR v_exc <> (CASE WHEN p_mode = 'exceptions' THEN v_done / 100 ELSE 0 END) THEN
        RAISE EXCEPTION 'prototype % drain: % jobs recorded of %, % batches open, % exception rows',
            p_mode, v_done, (SELECT count(*) FROM tokens), v_open, v_exc;
    END IF;
    INSERT INTO lease_cost.timings SELECT * FROM unnest(res);
    COMMIT;
END;
$$;

-- Fencing: a batch handed out again (lease ran out: attempt 2, another holder) ignores the first
-- holder's late acknowledgements, whole or partial, and a repeated acknowledgement records
-- nothing twice. Raises an exception when any of that fails; rolled back.
CREATE PROCEDURE lease_cost.proto_fencing_check()
    LANGUAGE plpgsql AS $$
DECLARE
    v_gid   INT;
    v_batch BIGINT;
    v_ids   BIGINT[];
    v_stale INT;
    v_part  BIGINT;
    v_new   INT;
    v_again INT;
BEGIN
    v_gid := lease_proto.start_group('fencing_check');
    SELECT min(batch_id), array_agg(job_id) INTO v_batch, v_ids
      FROM lease_proto.dequeue(v_gid, 1000, 'bench-1', 60000);
    -- What a re-lease after expiry does to the lease row.
    UPDATE lease_proto.batches SET attempt = attempt + 1, holder = 'bench-2'
     WHERE batch_id = v_batch;
    v_stale := lease_proto.ack_batch(v_gid, 'bench-1', v_batch, 1, v_ids, 0);
    SELECT count(*) INTO v_part
      FROM lease_proto.ack_jobs(v_gid, 'bench-1', v_batch, 1, v_ids[1:10],
                                array_fill('failed'::TEXT, ARRAY[10]),
                                array_fill('late'::TEXT, ARRAY[10]), array_fill(0, ARRAY[10]));
    v_new := lease_proto.ack_batch(v_gid, 'bench-2', v_batch, 2, v_ids, 0);
    v_again := lease_proto.ack_batch(v_gid, 'bench-2', v_batch, 2, v_ids, 0);
    IF v_stale <> 0 OR v_part <> 0 OR v_new <> cardinality(v_ids) OR v_again <> 0
       OR EXISTS (SELECT 1 FROM lease_proto.exceptions WHERE group_id = v_gid) THEN
        RAISE EXCEPTION 'fencing: stale whole % partial %, new holder %, repeated %',
            v_stale, v_part, v_new, v_again;
    END IF;
    RAISE NOTICE 'fencing check passed: stale holder recorded 0 (whole) and 0 (partial), the new holder %, a repeat 0',
        v_new;
    ROLLBACK;
END;
$$;
