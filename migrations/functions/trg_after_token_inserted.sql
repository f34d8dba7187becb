-- New tokens wake an idle collector. Once per statement: NOTIFY is only a wake-up signal
-- (PostgreSQL folds identical notifications of one transaction anyway). While every collector
-- is busy (mailroom_idle_collectors is 0: they poll their cursors) there is no NOTIFY, so the
-- commit takes no notification lock, the instance-wide lock a notifying commit holds through
-- its WAL flush. This trigger runs after its statement's INSERT: a transaction that read the
-- busy mark already has its xid, which is what the collector waits for when it goes idle
-- (docs/design.md, "Wake-up").

CREATE OR REPLACE FUNCTION trg_after_token_inserted() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF (SELECT last_value FROM mailroom_idle_collectors) > 0 THEN
        PERFORM pg_notify((SELECT channel FROM mailroom_settings), '');
    END IF;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE TRIGGER after_token_inserted AFTER INSERT ON tokens FOR EACH STATEMENT EXECUTE FUNCTION trg_after_token_inserted();
