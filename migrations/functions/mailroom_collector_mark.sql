-- Marks the calling connection's collector idle (p_idle true) or busy (false), or removes its
-- mark (NULL: a clean stop), and sets mailroom_idle_collectors to the number of idle collectors
-- still connected (rows of LISTEN connections that are gone are dropped first). Called by the
-- collector's LISTEN connection, alone in autocommit, under the turn of mailroom_mark_turn. The
-- value takes effect at once, before the commit; a count too high only costs NOTIFYs, and it is
-- never too low for a collector that listens (docs/design.md, "Wake-up").

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
