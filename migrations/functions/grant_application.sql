-- mailroom.grant_application(role): gives the application's role what the application's
-- interface needs, and nothing on mailroom's other tables (docs/integration.md). Run by the
-- migrations' role (the schema's owner), once per role; running it again changes nothing.
--   USAGE on the schema mailroom (to name the interface);
--   EXECUTE on mailroom.request, mailroom.consume, mailroom.consume_code,
--   mailroom.email_events (the event feed; its NOTIFY channel needs no right) and
--   mailroom.email_history (the ledger of an account's emails); SELECT on
--   mailroom.account_emails and mailroom.action_rules (each action's expiry, code and limits);
--   on mailroom.accounts, the application's own table: SELECT, INSERT (signups; the trigger
--   queues them), UPDATE of status, email, login and locale (the seeds' lifecycle), and USAGE
--   on its id sequence.
-- No right on tokens or any other table: the triggers and the interface run as their owner.
CREATE OR REPLACE FUNCTION mailroom.grant_application(p_role regrole) RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA mailroom TO %s', p_role);
    EXECUTE format('GRANT EXECUTE ON FUNCTION mailroom.request(bigint, text, text, text),'
                   ' mailroom.consume(text, text), mailroom.consume_code(bigint, text, text),'
                   ' mailroom.email_events(bigint, integer),'
                   ' mailroom.email_history(bigint, integer) TO %s',
                   p_role);
    EXECUTE format('GRANT SELECT ON mailroom.account_emails, mailroom.action_rules TO %s', p_role);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE (status, email, login, locale)'
                   ' ON mailroom.accounts TO %s', p_role);
    EXECUTE format('GRANT USAGE ON SEQUENCE mailroom.accounts_id_seq TO %s', p_role);
END;
$$;
