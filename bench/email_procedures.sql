-- The collector's per-email calls as procedures, for the benchmarks that measure them inside the
-- server (email_cost.sh, event_cost.sh), each call committed on its own with synchronous_commit
-- off, as collector/store/store.cc and the collector's publisher and retention call them. Loaded into
-- the throwaway database after mailroom's schema and a consumer group `bench`.
-- Unlogged: the benchmark's own record of its leases writes no WAL into the dequeue's figure.
CREATE UNLOGGED TABLE bench_leased (id BIGINT, attempt INT);

-- Every due job of `bench` leased, 1,000 a call; the leases kept for the acknowledgement.
CREATE PROCEDURE bench_dequeue() LANGUAGE plpgsql AS $$
DECLARE
    n INT;
BEGIN
    SET synchronous_commit = off;
    LOOP
        INSERT INTO bench_leased
        SELECT job_id, attempt FROM mailroom_dequeue('bench', 1000, 's', 600000);
        GET DIAGNOSTICS n = ROW_COUNT;
        COMMIT;
        EXIT WHEN n = 0;
    END LOOP;
END;
$$;

-- The leases acknowledged 1,000 a call (mailroom_ack and mailroom_record_sent, as Store::Ack):
-- p_retry % of each call's first hand-outs RETRY (due at once), the others SENT, each with a
-- provider message id 'm<id>' when p_mids, and with provider p_provider (NULL: none given).
CREATE PROCEDURE bench_ack(p_retry INT, p_mids BOOLEAN, p_provider TEXT) LANGUAGE plpgsql AS $$
DECLARE
    b RECORD;
    n INT;
BEGIN
    SET synchronous_commit = off;
    FOR b IN SELECT array_agg(l.id ORDER BY l.id) AS ids,
                    array_agg(l.attempt ORDER BY l.id) AS att,
                    array_agg(CASE WHEN l.attempt = 1 AND l.id % 100 < p_retry THEN 'retry'
                                   ELSE 'sent' END ORDER BY l.id) AS outs,
                    array_agg(CASE WHEN p_mids THEN 'm' || l.id ELSE '' END ORDER BY l.id) AS mids
               FROM (SELECT id, attempt, (row_number() OVER (ORDER BY id) - 1) / 1000 AS k
                       FROM bench_leased) l
              GROUP BY l.k ORDER BY l.k LOOP
        n := cardinality(b.ids);
        PERFORM count(*) FROM mailroom_ack('bench', 's', b.ids, b.att, b.outs,
                                          array_fill(''::TEXT, ARRAY[n]), array_fill(0, ARRAY[n]),
                                          array_fill(0::BIGINT, ARRAY[n]), b.mids,
                                          CASE WHEN p_provider IS NOT NULL
                                               THEN array_fill(p_provider, ARRAY[n]) END);
        PERFORM mailroom_record_sent('bench', (SELECT count(*) FROM unnest(b.outs) o
                                                WHERE o = 'sent'), '{}', '{}');
        COMMIT;
    END LOOP;
    TRUNCATE bench_leased;
    COMMIT;
END;
$$;

-- The staged events published, 10,000 a call, as the collector's publisher (nothing in a schema
-- without the feed).
CREATE PROCEDURE bench_publish() LANGUAGE plpgsql AS $$
BEGIN
    SET synchronous_commit = off;
    IF to_regproc('mailroom.mailroom_publish_events') IS NULL THEN
        RETURN;
    END IF;
    WHILE (SELECT more FROM mailroom_publish_events(10000)) LOOP
        COMMIT;
    END LOOP;
    COMMIT;
END;
$$;

-- The feed's events past their retention deleted, 1,000 a call, as the retention pass (nothing
-- in a schema without the feed).
CREATE PROCEDURE bench_prune_events() LANGUAGE plpgsql AS $$
BEGIN
    SET synchronous_commit = off;
    IF to_regproc('mailroom.mailroom_prune_email_events') IS NULL THEN
        RETURN;
    END IF;
    WHILE (SELECT more FROM mailroom_prune_email_events(1000)) LOOP
        COMMIT;
    END LOOP;
    COMMIT;
END;
$$;
