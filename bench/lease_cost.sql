-- bench/lease_cost.sh's measuring procedures (scratch schema lease_cost, loaded after the real
-- migrations into the bench's throwaway database; never a migration). Each procedure times the
-- steps of one 1000-job batch with clock_timestamp() inside PostgreSQL and stores one row per
-- batch and step in lease_cost.timings (written after the measured loop, so that the stored
-- timings are not part of what is measured).

CREATE SCHEMA lease_cost;

CREATE TABLE lease_cost.timings (
    run   TEXT NOT NULL,     -- experiment, e.g. 'a server'
    step  TEXT NOT NULL,     -- e.g. 'mailroom_dequeue'
    batch INT NOT NULL,      -- 1, 2, ... within the run
    jobs  INT NOT NULL,      -- jobs in the batch (only full batches are summarised)
    ms    FLOAT8 NOT NULL
);

CREATE FUNCTION lease_cost.ms(a TIMESTAMPTZ, b TIMESTAMPTZ) RETURNS FLOAT8
    LANGUAGE sql IMMUTABLE AS $$ SELECT EXTRACT(EPOCH FROM b - a) * 1000 $$;

-- The token window read of mailroom_dequeue's step 2 (migrations/functions/mailroom_dequeue.sql,
-- "New tokens of this class"), as a plain query with the
-- same predicates, joins, lateral calls, order and limit, and the same planner settings. Returns
-- the arrays the dequeue collects.
CREATE FUNCTION lease_cost.window_read(
        p_class token_action, p_pos_txid XID8, p_pos_id BIGINT, p_cur PG_SNAPSHOT,
        p_prev PG_SNAPSHOT, p_limit INT,
        OUT ids BIGINT[], OUT txids XID8[], OUT actions token_action[], OUT emails TEXT[],
        OUT logins TEXT[], OUT secrets BYTEA[], OUT codes TEXT[], OUT expires BIGINT[],
        OUT accounts BIGINT[], OUT created BIGINT[], OUT ok BOOLEAN[], OUT skip TEXT[],
        OUT locales TEXT[], OUT reasons TEXT[])
    LANGUAGE plpgsql
    SET enable_seqscan = off SET enable_bitmapscan = off SET enable_sort = off
    SET plan_cache_mode = force_generic_plan
    AS $$
DECLARE
    v_now BIGINT := EXTRACT(EPOCH FROM now())::BIGINT;
BEGIN
    SELECT array_agg(w.id), array_agg(w.txid), array_agg(w.action), array_agg(w.email),
           array_agg(w.login), array_agg(w.secret), array_agg(w.code),
           array_agg(w.expires_at), array_agg(w.account), array_agg(w.created_at),
           array_agg(w.ok), array_agg(w.skip), array_agg(w.locale),
           array_agg(w.suppressed_reason)
      INTO ids, txids, actions, emails, logins, secrets, codes, expires, accounts, created, ok,
           skip, locales, reasons
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
             -- The backlog is activations: their action needs a provisioned account.
             CROSS JOIN LATERAL (SELECT mailroom_token_sendable(t, a.status, v_now,
                                                                'provisioned') AS sendable) s0
             CROSS JOIN LATERAL (SELECT s0.sendable AND t.superseded_by IS NULL
                                       AND NOT t.rate_limited AND sp.address IS NULL AS ok,
                                       s0.sendable) s
             WHERE (t.action, t.txid, t.id) > (p_class, p_pos_txid, p_pos_id)
               AND (t.action, t.txid) < (p_class, pg_snapshot_xmax(p_cur))
               AND pg_visible_in_snapshot(t.txid, p_cur)
               AND NOT pg_visible_in_snapshot(t.txid, p_prev)
             ORDER BY t.action, t.txid, t.id
             LIMIT p_limit) w;
END;
$$;

-- mailroom_ack of jobs p_ids (attempts p_att) held by 'bench-1', all as SENT, with the argument
-- arrays the collector passes for such an acknowledgement ('' reasons, 0 retry, 0 cost).
CREATE FUNCTION lease_cost.ack_sent(p_group TEXT, p_ids BIGINT[], p_att INT[])
    RETURNS SETOF BIGINT
    LANGUAGE sql AS $$
    SELECT * FROM mailroom_ack(p_group, 'bench-1', p_ids, p_att,
                               array_fill('sent'::TEXT, ARRAY[cardinality(p_ids)]),
                               array_fill(''::TEXT, ARRAY[cardinality(p_ids)]),
                               array_fill(0, ARRAY[cardinality(p_ids)]),
                               array_fill(0::BIGINT, ARRAY[cardinality(p_ids)]));
$$;

-- a. The current path, one transaction pair per batch as the collector runs it
-- (collector/store/store.cc): mailroom_dequeue in a transaction committed with synchronous_commit off;
-- then mailroom_ack of the whole batch as SENT (the collector's argument arrays: ids, attempts,
-- 'sent', '' reasons, 0 retry, 0 cost) and mailroom_record_sent(group, recorded, '{}', '{}')
-- (SMTP outcomes carry no provider message id), committed with the server's synchronous_commit.
CREATE PROCEDURE lease_cost.current_path(p_run TEXT, p_group TEXT, p_batches INT)
    LANGUAGE plpgsql AS $$
DECLARE
    v_ids BIGINT[];
    v_att INT[];
    v_rec BIGINT[];
    n     INT;
    t     TIMESTAMPTZ[];
    res   lease_cost.timings[] := '{}';
BEGIN
    PERFORM mailroom_ensure_group(p_group, true);
    COMMIT;
    FOR i IN 1..p_batches LOOP
        PERFORM set_config('synchronous_commit', 'off', true);
        t[0] := clock_timestamp();
        SELECT array_agg(job_id), array_agg(attempt) INTO v_ids, v_att
          FROM mailroom_dequeue(p_group, 1000, 'bench-1', 60000);
        t[1] := clock_timestamp();
        COMMIT;
        t[2] := clock_timestamp();
        n := coalesce(cardinality(v_ids), 0);
        EXIT WHEN n = 0;
        SELECT array_agg(x) INTO v_rec FROM lease_cost.ack_sent(p_group, v_ids, v_att) x;
        t[3] := clock_timestamp();
        PERFORM mailroom_record_sent(p_group, cardinality(v_rec), '{}'::BIGINT[], '{}'::TEXT[]);
        t[4] := clock_timestamp();
        COMMIT;
        t[5] := clock_timestamp();
        IF cardinality(v_rec) <> n THEN
            RAISE EXCEPTION 'batch %: % of % outcomes recorded', i, cardinality(v_rec), n;
        END IF;
        res := res || ARRAY[
            (p_run, 'mailroom_dequeue', i, n, lease_cost.ms(t[0], t[1])),
            (p_run, 'commit (dequeue, synchronous_commit off)', i, n, lease_cost.ms(t[1], t[2])),
            (p_run, 'mailroom_ack (1000 SENT)', i, n, lease_cost.ms(t[2], t[3])),
            (p_run, 'mailroom_record_sent', i, n, lease_cost.ms(t[3], t[4])),
            (p_run, 'commit (acknowledgement)', i, n, lease_cost.ms(t[4], t[5])),
            (p_run, 'TOTAL dequeue+ack+commits', i, n, lease_cost.ms(t[0], t[5]))
        ]::lease_cost.timings[];
    END LOOP;
    INSERT INTO lease_cost.timings SELECT * FROM unnest(res);
    COMMIT;
END;
$$;

-- b. Inside the dequeue and the acknowledgement, each statement committed as on the current
-- path (one transaction per statement; the commits are not timed here): per batch, on one fresh
-- group, the whole mailroom_dequeue and mailroom_ack; on a second fresh group, the token window
-- read alone (lease_cost.window_read), the INSERT of the 1000 delivery rows alone (the dequeue's
-- INSERT ... ON CONFLICT DO NOTHING RETURNING) and the acknowledgement's UPDATE of those rows
-- alone, held to one plan (nested loop over the primary key) in every variant. When p_triggers
-- is false, 0013's statement triggers on deliveries are dropped (rather than disabled, so that
-- nothing of them, transition-table capture included, can remain); when p_only_pk is true,
-- every index of deliveries but its primary key is dropped. Both are created again from their
-- definitions at the end. Since the batch leases a first lease is a lease_batches row and its SENT
-- outcomes set bits: the whole mailroom_dequeue and mailroom_ack write no deliveries row (their
-- figures hardly depend on deliveries' triggers and indexes any more; the plain acknowledgement
-- no longer has a plan of its own without the indexes), and the INSERT and UPDATE timed alone
-- are the per-job lease and acknowledgement before 0021 (jobs handed out again still take them). (One long rolled-back transaction is no substitute: mailroom_ack in it
-- slowed down batch after batch, to a median of 90 ms per 1000 over 100 batches instead of 7.)
CREATE PROCEDURE lease_cost.steps(p_run TEXT, p_batches INT, p_triggers BOOLEAN,
                                  p_only_pk BOOLEAN)
    LANGUAGE plpgsql AS $$
DECLARE
    g_full TEXT := 'sf' || left(md5(p_run), 16);
    g_part TEXT := 'sp' || left(md5(p_run), 16);
    v_gid  INT;
    v_ids  BIGINT[];
    v_att  INT[];
    v_n    INT;
    v_prev PG_SNAPSHOT;
    v_cur  PG_SNAPSHOT := pg_current_snapshot();
    v_pos_txid XID8;
    v_pos_id   BIGINT := 0;
    w      RECORD;
    x      RECORD;
    v_restore TEXT[] := '{}';
    v_def  TEXT;
    t      TIMESTAMPTZ[];
    res    lease_cost.timings[] := '{}';
BEGIN
    IF NOT p_triggers THEN
        FOR x IN SELECT tgname, pg_get_triggerdef(oid) AS def FROM pg_trigger
                  WHERE tgrelid = 'deliveries'::regclass AND NOT tgisinternal LOOP
            v_restore := v_restore || x.def;
            EXECUTE format('DROP TRIGGER %I ON deliveries', x.tgname);
        END LOOP;
    END IF;
    IF p_only_pk THEN
        FOR x IN SELECT c.relname, pg_get_indexdef(i.indexrelid) AS def
                   FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
                  WHERE i.indrelid = 'deliveries'::regclass AND NOT i.indisprimary LOOP
            v_restore := v_restore || x.def;
            EXECUTE format('DROP INDEX %I', x.relname);
        END LOOP;
    END IF;
    PERFORM mailroom_ensure_group(g_full, true);
    PERFORM mailroom_ensure_group(g_part, true);
    SELECT g.id, c.prev_snapshot INTO v_gid, v_prev
      FROM consumer_groups g JOIN group_cursors c ON c.group_id = g.id AND c.priority = 'normal'
     WHERE g.name = g_part;
    v_pos_txid := pg_snapshot_xmin(v_prev);
    COMMIT;
    FOR i IN 1..p_batches LOOP
        PERFORM set_config('synchronous_commit', 'off', true);
        t[0] := clock_timestamp();
        SELECT array_agg(job_id), array_agg(attempt) INTO v_ids, v_att
          FROM mailroom_dequeue(g_full, 1000, 'bench-1', 60000);
        t[1] := clock_timestamp();
        COMMIT;
        v_n := coalesce(cardinality(v_ids), 0);
        EXIT WHEN v_n = 0;
        t[2] := clock_timestamp();
        PERFORM lease_cost.ack_sent(g_full, v_ids, v_att);
        t[3] := clock_timestamp();
        COMMIT;
        -- The same batch's parts on the other group's cursor.
        PERFORM set_config('synchronous_commit', 'off', true);
        t[4] := clock_timestamp();
        SELECT * INTO w
          FROM lease_cost.window_read('activation', v_pos_txid, v_pos_id, v_cur, v_prev, 1000);
        t[5] := clock_timestamp();
        IF cardinality(w.ids) <> v_n THEN
            RAISE EXCEPTION 'window read % rows, dequeue %', cardinality(w.ids), v_n;
        END IF;
        v_pos_txid := w.txids[v_n];
        v_pos_id := w.ids[v_n];
        WITH ins AS (
            INSERT INTO deliveries (group_id, token_id, state, owner, due_at, recovery)
            SELECT v_gid, r.id, 'leased', 'bench-1', now() + interval '60 s', false
              FROM unnest(w.ids, w.ok) AS r(id, ok) WHERE r.ok
            ON CONFLICT DO NOTHING
            RETURNING token_id
        )
        SELECT count(*) INTO v_n FROM ins;
        t[6] := clock_timestamp();
        COMMIT;
        -- The acknowledgement's row update (mailroom_ack's SET list, all SENT) held to one plan
        -- in every variant: a nested loop over deliveries_pkey. The state test is written so
        -- that no partial index can serve it (otherwise the planner may walk deliveries_due_idx
        -- or deliveries_owner_idx, over every dead version of the run, and the figure would be
        -- that plan's rather than the row and index writes').
        PERFORM set_config('enable_seqscan', 'off', true);
        PERFORM set_config('enable_bitmapscan', 'off', true);
        PERFORM set_config('enable_hashjoin', 'off', true);
        PERFORM set_config('enable_mergejoin', 'off', true);
        t[7] := clock_timestamp();
        UPDATE deliveries d
           SET state = 'sent', failures = d.failures, reason = NULL, cost_micros = 0,
               owner = NULL, holder_left = false, due_at = NULL, updated_at = now()
          FROM unnest(w.ids) AS u(id)
         WHERE d.group_id = v_gid AND d.token_id = u.id AND d.state::TEXT = 'leased'
           AND d.owner = 'bench-1' AND d.attempts = 1;
        t[8] := clock_timestamp();
        COMMIT;
        res := res || ARRAY[
            (p_run, CASE WHEN p_only_pk
                         THEN 'mailroom_dequeue (no due index: its lease-expiry probe scans)'
                         ELSE 'mailroom_dequeue' END, i, v_n, lease_cost.ms(t[0], t[1])),
            (p_run, 'mailroom_ack (1000 SENT)', i, v_n, lease_cost.ms(t[2], t[3])),
            (p_run, 'window read alone', i, v_n, lease_cost.ms(t[4], t[5])),
            (p_run, 'INSERT 1000 deliveries alone (pre-0021 lease)', i, v_n,
             lease_cost.ms(t[5], t[6])),
            (p_run, 'UPDATE of those rows to sent alone (by pkey; pre-0021 ack)', i, v_n,
             lease_cost.ms(t[7], t[8]))
        ]::lease_cost.timings[];
    END LOOP;
    FOREACH v_def IN ARRAY v_restore LOOP
        EXECUTE v_def;
    END LOOP;
    INSERT INTO lease_cost.timings SELECT * FROM unnest(res);
    COMMIT;
END;
$$;

-- Medians (and min/max) of the full batches of a run, one row per step, in the order the steps
-- were first recorded.
CREATE FUNCTION lease_cost.summary(p_run TEXT)
    RETURNS TABLE (step TEXT, batches BIGINT, median_ms NUMERIC, min_ms NUMERIC, max_ms NUMERIC,
                   jobs_per_s NUMERIC)
    LANGUAGE sql AS $$
    SELECT t.step, count(*),
           round(percentile_cont(0.5) WITHIN GROUP (ORDER BY t.ms)::NUMERIC, 2),
           round(min(t.ms)::NUMERIC, 2), round(max(t.ms)::NUMERIC, 2),
           round(1000 / (percentile_cont(0.5) WITHIN GROUP (ORDER BY t.ms) / 1000)::NUMERIC, -2)
      FROM lease_cost.timings t
     WHERE t.run = p_run AND t.jobs = 1000
     GROUP BY t.step
     ORDER BY min(ctid);
$$;
