-- Marks the calling connection's collector idle (p_idle true) or busy (false), or removes its
-- mark (NULL: the collector stops cleanly, so that it no longer counts as idle), and sets
-- mailroom_idle_collectors to the number of idle collectors still connected (rows of LISTEN
-- connections that are gone are dropped first). The value takes effect at once, before this
-- transaction commits (a sequence is not transactional): a busy collector polls from the call
-- on, and an idle one dequeues once more after the transactions running at the call's end,
-- which may have read the old value (docs/design.md, "Wake-up"). A count too high (a collector
-- killed while idle, until any collector changes its mark) only means commits NOTIFY; a count
-- of 0 with no collector connected is safe, because a collector drains its groups when it
-- connects.
--
-- Called alone in autocommit (one round trip). Collectors take turns under a transaction-level
-- advisory lock that the trigger never takes, held only until that statement's commit, so the
-- count set is never one built from another collector's uncommitted change. The commit is
-- asynchronous: after a crash of PostgreSQL every collector reconnects and marks itself again.

CREATE OR REPLACE FUNCTION mailroom_collector_mark(p_idle boolean) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    PERFORM pg_advisory_xact_lock(hashtextextended('mailroom.collector_mark', 0));
    DELETE FROM mailroom_collectors c
     WHERE c.pid <> pg_backend_pid()
       AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = c.pid);
    IF p_idle IS NULL THEN
        DELETE FROM mailroom_collectors c WHERE c.pid = pg_backend_pid();
    ELSE
        INSERT INTO mailroom_collectors (pid, idle) VALUES (pg_backend_pid(), p_idle)
            ON CONFLICT (pid) DO UPDATE SET idle = EXCLUDED.idle;
    END IF;
    PERFORM setval('mailroom_idle_collectors',
                   (SELECT count(*) FROM mailroom_collectors WHERE idle), true);
END;
$$;
