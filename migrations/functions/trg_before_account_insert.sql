-- A new account inserted 'provisioned' queues its activation request: one row in
-- mailroom_signups (no index, key or foreign key: one heap tuple in the application's
-- transaction); the collector makes the token (mailroom_collect_signups). Fired by INSERT on
-- accounts; its WHEN skips accounts inserted 'active' or 'suspended' (imports). A BEFORE trigger,
-- so a row that ON CONFLICT DO NOTHING then skips leaves a queued id no account has, which the
-- collector drops (docs/design.md, "Signups are queued; the collector makes the tokens").

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
