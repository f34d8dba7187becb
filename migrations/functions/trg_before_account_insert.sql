-- A new account that needs activating (inserted 'provisioned') queues its activation request:
-- one row in mailroom_signups, which has no index, key or foreign key, so the application's
-- transaction writes one heap tuple and nothing else. The collector creates the token
-- (mailroom_collect_signups), deciding the abuse limits there. An account inserted 'active' or
-- 'suspended' (an import of existing users) queues nothing: the trigger's WHEN skips the call.
--
-- A BEFORE trigger (an AFTER row trigger would queue an event per row): a row that an
-- INSERT ... ON CONFLICT DO NOTHING then skips leaves a queued row for an id that no account
-- has, which the collector drops.

CREATE OR REPLACE FUNCTION mailroom.trg_before_account_insert() RETURNS trigger
    LANGUAGE plpgsql
    SECURITY DEFINER
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
BEGIN
    INSERT INTO mailroom_signups (account) VALUES (NEW.id);
    RETURN NEW;
END;
$$;

CREATE OR REPLACE TRIGGER before_account_insert BEFORE INSERT ON mailroom.accounts FOR EACH ROW
    WHEN (NEW.status = 'provisioned')
    EXECUTE FUNCTION mailroom.trg_before_account_insert();
