-- The dequeue's plan does not depend on planner statistics.
--
-- mailroom_dequeue reads each window as an index range scan on tokens (txid, id) from the
-- group's cursor, LIMIT batch: O(batch) whatever the backlog. On a queue that was never
-- ANALYZEd (a fresh database, a freshly restored one, a burst before autovacuum's analyze) the
-- planner guessed a few hundred rows per window and chose a bitmap scan of the whole range, a
-- hash of every account (sequential scan) and a sort: each connection's first calls read the
-- whole queue (~66 ms per 1000 jobs instead of ~11 ms) until statistics existed.
--
-- The function now runs with the plan shapes that are wrong here priced out: no sequential
-- scans, no bitmap scans, no explicit sorts (the index already gives the order). These are
-- penalties, not prohibitions: a table without a usable index is still read. Hash joins stay
-- allowed (the lease insert joins two CTEs without an index).
--
-- Settings given by ALTER FUNCTION are reset by CREATE OR REPLACE FUNCTION (and lost with
-- DROP/CREATE): a later migration that redefines mailroom_dequeue must state them again
-- (`SET enable_seqscan = off SET enable_bitmapscan = off SET enable_sort = off` in its
-- CREATE FUNCTION, or this statement after it). schema_test checks both the settings and the
-- plan on an un-ANALYZEd queue. Every overload named mailroom_dequeue is covered, so a changed
-- signature does not break this migration.
DO $$
DECLARE
    f REGPROCEDURE;
BEGIN
    FOR f IN SELECT p.oid::REGPROCEDURE FROM pg_proc p
              WHERE p.proname = 'mailroom_dequeue' AND p.pronamespace = current_schema()::REGNAMESPACE
    LOOP
        EXECUTE format('ALTER FUNCTION %s SET enable_seqscan = off SET enable_bitmapscan = off'
                       ' SET enable_sort = off', f);
    END LOOP;
END;
$$;
