-- Status changes maintain the lifecycle timestamps, and queue the account's notices: one
-- account_suspended token when it is suspended, one account_reactivated token when a suspended
-- account becomes active again (one that was never activated goes back to provisioned with a
-- fresh activation instead). The notices' own per-account limits (mailroom.actions) bound what
-- a flood of changes sends: the rest are kept rate limited, never sent.

CREATE OR REPLACE FUNCTION mailroom.trg_before_account_status_change() RETURNS trigger
    LANGUAGE plpgsql
    SECURITY DEFINER
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
DECLARE
    ts BIGINT := EXTRACT(EPOCH FROM NOW())::BIGINT;
BEGIN
    IF (NEW.status = OLD.status) THEN
        RETURN NEW;
    END IF;

    NEW.status_changed_at = ts;

    IF (NEW.status = 'active') THEN
        IF (OLD.status IN ('provisioned', 'invited')) THEN
            NEW.activated_at = ts;
        ELSIF (OLD.status = 'suspended') THEN
            NEW.unsuspended_at = ts;
            NEW.suspended_at = NULL;
            -- Never activated: back to 'provisioned'.
            IF (OLD.activated_at IS NULL) THEN
                NEW.status = 'provisioned';
            END IF;
        END IF;
    ELSIF (NEW.status = 'suspended') THEN
        NEW.suspended_at = ts;
        NEW.unsuspended_at = NULL;
    ELSIF (NEW.status = 'provisioned' AND OLD.status = 'suspended') THEN
        NEW.unsuspended_at = ts;
        NEW.suspended_at = NULL;
    END IF;

    -- A provisioned account must be able to activate: issue a fresh activation token unless
    -- a live one exists.
    IF (NEW.status = 'provisioned' AND OLD.status = 'suspended'
        AND NOT EXISTS (SELECT 1 FROM tokens t
                         WHERE t.account = NEW.id AND t.action = 'activation'
                           AND t.consumed_at IS NULL
                           AND t.expires_at > EXTRACT(EPOCH FROM NOW()))) THEN
        INSERT INTO tokens (account, action) VALUES (NEW.id, 'activation');
    END IF;
    IF (NEW.status = 'suspended') THEN
        INSERT INTO tokens (account, action) VALUES (NEW.id, 'account_suspended');
    ELSIF (NEW.status = 'active' AND OLD.status = 'suspended') THEN
        INSERT INTO tokens (account, action) VALUES (NEW.id, 'account_reactivated');
    END IF;
    RETURN NEW;
END;
$$;

CREATE OR REPLACE TRIGGER before_account_status_change BEFORE UPDATE OF status ON mailroom.accounts FOR EACH ROW EXECUTE FUNCTION mailroom.trg_before_account_status_change();
