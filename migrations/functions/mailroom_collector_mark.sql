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
-- Called alone in autocommit (one round trip). Collectors take turns by locking
-- mailroom_mark_turn (SHARE UPDATE EXCLUSIVE, which conflicts with itself and with no lock a
-- statement takes while it is parsed; taking it needs UPDATE, DELETE or TRUNCATE on the table,
-- which only mailroom's roles have, unlike an advisory lock, which any role that can connect may
-- take and hold), held only until that statement's commit,
-- so the count set is never one built from another collector's uncommitted change. The
-- triggers never take it. lock_timeout bounds the wait: a turn not had within it is an error
-- the collector logs, and it marks itself again on its next round. The commit is
-- asynchronous: after a crash of PostgreSQL every collector reconnects and marks itself again.

CREATE OR REPLACE FUNCTION mailroom.mailroom_collector_mark(p_idle boolean) RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    SET lock_timeout = '5s'
    AS $$
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    LOCK TABLE mailroom_mark_turn IN SHARE UPDATE EXCLUSIVE MODE;
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
