-- An account's address is a mailbox mailroom can send to (mailroom_mailbox_refusal), checked on
-- every INSERT and on every UPDATE that sets the address: refused with check_violation and
-- the reason. Rows from before the rule are checked only when their address is set again, so
-- a status change of an old row still works. The WHEN is the rule's fast form (lengths and
-- the dot-atom expression, no call): a valid address runs no function in the application's
-- transaction.
CREATE OR REPLACE FUNCTION mailroom.trg_before_account_email_check() RETURNS trigger
    LANGUAGE plpgsql
    SECURITY DEFINER
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
BEGIN
    RAISE EXCEPTION 'invalid email address: %',
        coalesce(mailroom_mailbox_refusal(NEW.email), 'not a mailbox')
        USING ERRCODE = 'check_violation', TABLE = 'accounts', COLUMN = 'email',
              CONSTRAINT = 'accounts_email_mailbox_check',
              HINT = 'an ASCII dot-atom local part of at most 64 characters, one @, a domain of'
                     ' two or more labels, 254 characters at most (docs/sql.md)';
END;
$$;

CREATE OR REPLACE TRIGGER before_account_email_check
    BEFORE INSERT OR UPDATE OF email ON mailroom.accounts FOR EACH ROW
    WHEN (NOT (char_length(btrim(NEW.email::text)) <= 254
               AND char_length(split_part(btrim(NEW.email::text), '@', 1)) <= 64
               AND btrim(NEW.email::text)
                   ~ ('^[A-Za-z0-9!#$%&''*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&''*+/=?^_`{|}~-]+)*'
                      '@[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?'
                      '(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)+$')))
    EXECUTE FUNCTION mailroom.trg_before_account_email_check();
