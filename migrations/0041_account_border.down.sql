-- Back before 0041: codes typed alone for every action with a code, wrong codes counted in the
-- token's row only, uniqueness by the exact spelling, any address accepted. The pool's
-- sequences, its table and the functions and triggers of 0041 go (the release before has no
-- file for them, so nothing else would drop them); the function files of the release before
-- put their bodies back.
DROP TRIGGER IF EXISTS before_account_email_check ON accounts;
DROP TRIGGER IF EXISTS after_account_email_change ON accounts;
DROP FUNCTION IF EXISTS trg_before_account_email_check();
DROP FUNCTION IF EXISTS trg_after_account_email_change();
DROP FUNCTION IF EXISTS mailroom_take_code_counter(BIGINT, BIGINT);
DROP FUNCTION IF EXISTS mailroom_grow_code_counters();
DROP FUNCTION IF EXISTS mailroom_limit_address(TEXT);
ALTER TABLE accounts ADD CONSTRAINT accounts_email_key UNIQUE (email);
CREATE INDEX accounts_address_idx ON accounts USING btree (lower(TRIM(BOTH FROM email)));
DROP INDEX accounts_address_key;
UPDATE actions SET limit_per_address = NULL WHERE name = 'email_changed' AND limit_per_address = 3;

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
DROP TABLE code_counters;
ALTER TABLE actions DROP CONSTRAINT actions_recovery_code_check,
    DROP CONSTRAINT actions_code_alone_check, DROP COLUMN code_alone;
