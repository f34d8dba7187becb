-- New tokens wake the collector. Once per statement: NOTIFY is only a wake-up signal
-- (PostgreSQL folds identical notifications of one transaction anyway).

CREATE OR REPLACE FUNCTION trg_after_token_inserted() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM pg_notify((SELECT channel FROM mailroom_settings), '');
    RETURN NULL;
END;
$$;

CREATE OR REPLACE TRIGGER after_token_inserted AFTER INSERT ON tokens FOR EACH STATEMENT EXECUTE FUNCTION trg_after_token_inserted();
