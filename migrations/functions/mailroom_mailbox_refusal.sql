-- Why p_address is not a mailbox mailroom can send to, or NULL when it is: the rule of every
-- account's address (trg_before_account_email_check) and of email_change's new address
-- (mailroom_new_address_refusal), the one the sender checks before it sends. Surrounding
-- spaces are ignored; inside, only RFC 5321's dot-atom: ASCII letters, digits and
-- !#$%&'*+/=?^_`{|}~- in dot-separated runs, at most 64 characters before a single `@`, then
-- a domain of at least two labels of letters, digits and inner hyphens (no address literals,
-- no quoted local parts, no SMTPUTF8), 254 characters in all. The accounts' trigger calls it
-- only for an address outside a cheaper subset of the rule (trg_before_account_email_check).
CREATE OR REPLACE FUNCTION mailroom.mailroom_mailbox_refusal(p_address TEXT) RETURNS TEXT
    LANGUAGE plpgsql IMMUTABLE
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
DECLARE
    v TEXT := btrim(p_address);
BEGIN
    IF v IS NULL OR v = '' THEN
        RETURN 'empty';
    ELSIF v ~ '[[:cntrl:] ]' THEN
        RETURN 'spaces or control characters';
    ELSIF v ~ '[^\x01-\x7e]' THEN
        RETURN 'non-ASCII characters (SMTPUTF8 is not supported)';
    ELSIF char_length(v) > 254 THEN
        RETURN 'longer than 254 characters';
    ELSIF v !~ '^[^@]+@[^@]+$' THEN
        RETURN 'needs exactly one ''@'' with text on both sides';
    ELSIF char_length(split_part(v, '@', 1)) > 64 THEN
        RETURN 'local part longer than 64 characters';
    ELSIF v !~ ('^[A-Za-z0-9!#$%&''*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&''*+/=?^_`{|}~-]+)*'
                '@[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?'
                '(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)+$') THEN
        RETURN 'not a dot-atom local part at a domain of two or more labels';
    END IF;
    RETURN NULL;
END;
$$;
