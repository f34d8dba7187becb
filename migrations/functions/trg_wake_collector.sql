-- New tokens and queued signups wake an idle collector. Once per statement: NOTIFY is only a
-- wake-up signal (PostgreSQL folds identical notifications of one transaction anyway). While
-- every collector is busy (mailroom_idle_collectors is 0: they poll their cursors) there is no
-- NOTIFY, so the commit takes no notification lock, the instance-wide lock a notifying commit
-- holds through its WAL flush. The triggers' WHEN reads the mark with a built-in function
-- (pg_sequence_last_value: NULL before any collector set it), so a busy mark costs the
-- statement no function call. The condition is evaluated after its statement's INSERT: a
-- transaction that read the busy mark already has its xid, which is what the collector waits
-- for when it goes idle (docs/design.md, "Wake-up").

CREATE OR REPLACE FUNCTION mailroom.trg_wake_collector() RETURNS trigger
    LANGUAGE plpgsql
    SECURITY DEFINER
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
BEGIN
    PERFORM pg_notify((SELECT channel FROM mailroom_settings), '');
    RETURN NULL;
END;
$$;

CREATE OR REPLACE TRIGGER after_token_inserted AFTER INSERT ON mailroom.tokens FOR EACH STATEMENT
    WHEN (pg_sequence_last_value('mailroom_idle_collectors') > 0)
    EXECUTE FUNCTION mailroom.trg_wake_collector();

CREATE OR REPLACE TRIGGER after_signup_inserted AFTER INSERT ON mailroom.mailroom_signups FOR EACH STATEMENT
    WHEN (pg_sequence_last_value('mailroom_idle_collectors') > 0)
    EXECUTE FUNCTION mailroom.trg_wake_collector();
