-- Why account p_account cannot change its address to p_address, or NULL when it can: the
-- address is missing, malformed (no single '@' with text on both sides, over 254 characters),
-- already the account's own, or another account's (compared as mailroom compares addresses,
-- lower(trim(...)), on accounts_address_idx). mailroom.request checks it for email_change and
-- mailroom.consume again when the change is confirmed (another account may have taken the
-- address meanwhile).
CREATE OR REPLACE FUNCTION mailroom.mailroom_new_address_refusal(p_account BIGINT, p_address TEXT)
    RETURNS TEXT
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
DECLARE
    v_new TEXT := lower(trim(p_address));
    v_own TEXT;
BEGIN
    IF v_new IS NULL OR v_new = '' THEN
        RETURN 'email_change needs the new address';
    END IF;
    IF char_length(trim(p_address)) > 254 OR v_new !~ '^[^@\s]+@[^@\s]+$' THEN
        RETURN 'malformed address';
    END IF;
    SELECT lower(trim(a.email)) INTO v_own FROM accounts a WHERE a.id = p_account;
    IF v_own = v_new THEN
        RETURN 'the account already has this address';
    END IF;
    IF EXISTS (SELECT 1 FROM accounts a
                WHERE lower(trim(a.email)) = v_new AND a.id <> p_account) THEN
        RETURN 'address in use by another account';
    END IF;
    RETURN NULL;
END;
$$;
