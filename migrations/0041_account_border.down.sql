-- Back before 0041: codes typed alone for every action with a code, wrong codes counted in the
-- token's row only, uniqueness by the exact spelling, any address accepted. The pool's
-- sequences and table go; the function files of the release before put their bodies back.
ALTER TABLE accounts DROP CONSTRAINT IF EXISTS accounts_email_mailbox_check;
ALTER TABLE accounts ADD CONSTRAINT accounts_email_key UNIQUE (email);
CREATE INDEX accounts_address_idx ON accounts USING btree (lower(TRIM(BOTH FROM email)));
DROP INDEX accounts_address_key;

DO $$
DECLARE
    v_slot INT;
BEGIN
    FOR v_slot IN SELECT c.slot FROM code_counters c LOOP
        EXECUTE format('DROP SEQUENCE IF EXISTS mailroom.mailroom_code_attempts_%s', v_slot);
    END LOOP;
END;
$$;
ALTER TABLE tokens DROP COLUMN code_slot, DROP COLUMN code_base;
DROP SEQUENCE code_counter_slots;
DROP TABLE code_counters;
ALTER TABLE actions DROP CONSTRAINT actions_recovery_code_check,
    DROP CONSTRAINT actions_code_alone_check, DROP COLUMN code_alone;
