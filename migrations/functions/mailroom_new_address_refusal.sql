-- Why account p_account cannot change its address to p_address, or NULL when it can: the
-- address is missing, not a mailbox the sender can send to (mailroom_mailbox_refusal, the rule
-- of every account's address), already the account's own, or another account's (compared as
-- mailroom compares addresses, lower(btrim(...)), on the unique accounts_address_key). mailroom.request
-- checks it for email_change and mailroom.consume again when the change is confirmed (another
-- account may have taken the address meanwhile; two confirmations at once meet on the unique
-- index, and the second is told address_taken).
CREATE OR REPLACE FUNCTION mailroom.mailroom_new_address_refusal(p_account BIGINT, p_address TEXT)
    RETURNS TEXT
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
DECLARE
    v_new TEXT := lower(btrim(p_address));
    v_own TEXT;
BEGIN
    IF v_new IS NULL OR v_new = '' THEN
        RETURN 'email_change needs the new address';
    END IF;
    IF mailroom_mailbox_refusal(p_address) IS NOT NULL THEN
        RETURN 'malformed address';
    END IF;
    SELECT lower(btrim(a.email)) INTO v_own FROM accounts a WHERE a.id = p_account;
    IF v_own = v_new THEN
        RETURN 'the account already has this address';
    END IF;
    IF EXISTS (SELECT 1 FROM accounts a
                WHERE lower(btrim(a.email)) = v_new AND a.id <> p_account) THEN
        RETURN 'address in use by another account';
    END IF;
    RETURN NULL;
END;
$$;
