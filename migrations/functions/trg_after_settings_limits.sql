-- mailroom_settings' four limit columns of the first releases stay meaningful: an UPDATE of one
-- sets the limit of its action's row in mailroom.actions, where the limits are read from.
-- (Reading them back from mailroom_settings gives what was last written there, not what an
-- UPDATE of actions set since: mailroom.actions is the authority.)

CREATE OR REPLACE FUNCTION mailroom.trg_after_settings_limits() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
BEGIN
    IF NEW.activation_limit_per_account IS DISTINCT FROM OLD.activation_limit_per_account
       OR NEW.activation_limit_per_address IS DISTINCT FROM OLD.activation_limit_per_address THEN
        UPDATE actions
           SET limit_per_account = NEW.activation_limit_per_account,
               limit_per_address = NEW.activation_limit_per_address
         WHERE name = 'activation';
    END IF;
    IF NEW.recovery_limit_per_account IS DISTINCT FROM OLD.recovery_limit_per_account
       OR NEW.recovery_limit_per_address IS DISTINCT FROM OLD.recovery_limit_per_address THEN
        UPDATE actions
           SET limit_per_account = NEW.recovery_limit_per_account,
               limit_per_address = NEW.recovery_limit_per_address
         WHERE name = 'password_recovery';
    END IF;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE TRIGGER after_settings_limits
    AFTER UPDATE OF activation_limit_per_account, activation_limit_per_address,
                    recovery_limit_per_account, recovery_limit_per_address
    ON mailroom.mailroom_settings FOR EACH ROW
    EXECUTE FUNCTION mailroom.trg_after_settings_limits();
