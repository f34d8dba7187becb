-- Consuming an activation token activates its account.

CREATE OR REPLACE FUNCTION mailroom.trg_after_token_consumed() RETURNS trigger
    LANGUAGE plpgsql
    SECURITY DEFINER
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
BEGIN
    IF (NEW.action != 'activation') THEN
        RETURN NULL;
    END IF;
    UPDATE accounts SET status = 'active' WHERE id = NEW.account AND status = 'provisioned';
    RETURN NULL;
END;
$$;

CREATE OR REPLACE TRIGGER after_token_consumed AFTER UPDATE OF consumed_at ON mailroom.tokens FOR EACH ROW WHEN (((new.consumed_at IS NOT NULL) AND (old.consumed_at IS NULL))) EXECUTE FUNCTION mailroom.trg_after_token_consumed();
