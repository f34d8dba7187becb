-- Every change of an account's address is told to the old one: the email_changed notice, a
-- token of its own to the old address (to_address), decided by the limits trigger like any
-- other: its per-account limit bounds what a flood of changes of one account sends, its
-- per-address limit what accounts made to take an address and leave it can send there. A confirmed email_change
-- (trg_after_token_consumed) and the application's own UPDATE of accounts.email alike, so that
-- an address changed without the user (by the application's role, or SQL injected into the
-- application) cannot take the account's next password recovery unheard. A change of spelling
-- only (case, surrounding spaces) is no change: mailroom compares lower(btrim(email)).
CREATE OR REPLACE FUNCTION mailroom.trg_after_account_email_change() RETURNS trigger
    LANGUAGE plpgsql
    SECURITY DEFINER
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
BEGIN
    INSERT INTO tokens (account, action, to_address)
    VALUES (NEW.id, 'email_changed', btrim(OLD.email));
    RETURN NULL;
END;
$$;

CREATE OR REPLACE TRIGGER after_account_email_change AFTER UPDATE OF email ON mailroom.accounts
    FOR EACH ROW
    WHEN (lower(btrim(OLD.email::text)) IS DISTINCT FROM lower(btrim(NEW.email::text)))
    EXECUTE FUNCTION mailroom.trg_after_account_email_change();
