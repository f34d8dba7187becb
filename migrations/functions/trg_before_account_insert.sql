-- The activation token of a new account: its row is not there yet, so the address is passed.

CREATE OR REPLACE FUNCTION trg_before_account_insert() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF (NEW.status = 'provisioned') THEN
        INSERT INTO tokens (account, action, address)
        VALUES (NEW.id, 'activation', lower(trim(NEW.email)));
    END IF;
    RETURN NEW;
END;
$$;

CREATE OR REPLACE TRIGGER before_account_insert BEFORE INSERT ON accounts FOR EACH ROW EXECUTE FUNCTION trg_before_account_insert();
