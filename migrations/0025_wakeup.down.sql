-- Without the busy mark: the token trigger NOTIFYs on every statement that inserts tokens
-- again (the next `collector migrate` re-applies the function files).

CREATE OR REPLACE FUNCTION trg_after_token_inserted() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM pg_notify((SELECT channel FROM mailroom_settings), '');
    RETURN NULL;
END;
$$;

DROP FUNCTION IF EXISTS mailroom_collector_mark(boolean);
DROP TABLE mailroom_collectors;
DROP SEQUENCE mailroom_idle_collectors;
