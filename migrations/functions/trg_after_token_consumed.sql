-- Consuming a token runs the seeds' lifecycle: an activation activates its provisioned account,
-- an invitation its invited account; an email_change moves the account to the token's pending
-- address (to_address), and the accounts' trigger on a changed address
-- (trg_after_account_email_change) queues the email_changed notice to the old address, as it
-- does for every change of address.

CREATE OR REPLACE FUNCTION mailroom.trg_after_token_consumed() RETURNS trigger
    LANGUAGE plpgsql
    SECURITY DEFINER
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
BEGIN
    IF NEW.action = 'activation' THEN
        UPDATE accounts SET status = 'active' WHERE id = NEW.account AND status = 'provisioned';
    ELSIF NEW.action = 'invitation' THEN
        UPDATE accounts SET status = 'active' WHERE id = NEW.account AND status = 'invited';
    ELSIF NEW.action = 'email_change' AND NEW.to_address IS NOT NULL THEN
        UPDATE accounts SET email = NEW.to_address WHERE id = NEW.account;
    END IF;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE TRIGGER after_token_consumed AFTER UPDATE OF consumed_at ON mailroom.tokens FOR EACH ROW WHEN (((new.consumed_at IS NOT NULL) AND (old.consumed_at IS NULL))) EXECUTE FUNCTION mailroom.trg_after_token_consumed();
