-- New tokens and queued signups wake an idle collector: one NOTIFY per statement. Fired after
-- INSERT on tokens and mailroom_signups; its WHEN skips the call while every collector is busy
-- (mailroom_idle_collectors is 0), so such a commit takes no notification lock. The WHEN runs
-- after the statement's INSERT, so a transaction that read the busy mark already has its xid
-- (docs/design.md, "Wake-up").

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
