-- Back before 0043: the application's view of the actions' rules goes (the rights given on it
-- with it), and mailroom.grant_application's previous body is put back (not left to the source
-- file, which grants SELECT on the view), so that it keeps working until the next
-- `collector migrate up`. account_emails and consume_code are left to their files.
DROP VIEW IF EXISTS action_rules;

CREATE OR REPLACE FUNCTION mailroom.grant_application(p_role regrole) RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA mailroom TO %s', p_role);
    EXECUTE format('GRANT EXECUTE ON FUNCTION mailroom.request(bigint, text, text),'
                   ' mailroom.consume(text, text), mailroom.consume_code(bigint, text, text) TO %s',
                   p_role);
    EXECUTE format('GRANT SELECT ON mailroom.account_emails TO %s', p_role);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE (status, email, login, locale)'
                   ' ON mailroom.accounts TO %s', p_role);
    EXECUTE format('GRANT USAGE ON SEQUENCE mailroom.accounts_id_seq TO %s', p_role);
END;
$$;
