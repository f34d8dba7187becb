-- mailroom.action_rules: each action's rules as mailroom applies them, for the application (what
-- an email carries, how long it lasts, whom it is for and how often it may be asked for: the
-- "expires in 15 minutes" of a page, which actions to offer an account). Part of the
-- application's interface (docs/integration.md): the application's role gets SELECT on it and
-- no right on mailroom.actions or mailroom_settings (a view reads them with its owner's rights).
-- One row per row of mailroom.actions, built in or the application's own:
--   name; carries_secret (the email has a link whose token mailroom.consume takes back);
--   carries_code (a code is signed into the token and required by consume); code_alone (the
--   code may be typed alone: mailroom.consume_code); code_length (digits of the code; NULL for
--   an action without one); expiry_seconds (a token's lifetime from its request); priority
--   (the class: critical, normal, notice); account_status (the status an account must have to
--   be sent it and to consume it; NULL: any); limit_per_account and limit_per_address
--   (accepted requests per window; NULL: no limit, 0: none) and limit_window_seconds (the
--   window in force: the action's own, else mailroom_settings.limit_window_seconds).
-- A change to mailroom.actions shows here at once and applies to the tokens requested from
-- then on. Created, every role that may read mailroom.account_emails (the application's roles
-- granted before this view existed) may read it too, so an upgrade needs no new grant; when it
-- is created again, collector migrate gives back the rights held on it.
CREATE OR REPLACE VIEW action_rules AS
SELECT k.name,
       k.carries_secret,
       k.carries_code,
       k.code_alone,
       CASE WHEN k.carries_code THEN k.code_length::int END AS code_length,
       k.expiry_seconds,
       k.priority,
       k.account_status,
       k.limit_per_account,
       k.limit_per_address,
       coalesce(k.limit_window_seconds, s.limit_window_seconds) AS limit_window_seconds
  FROM actions k
 CROSS JOIN mailroom_settings s;

DO $$
DECLARE
    v_role regrole;
BEGIN
    FOR v_role IN SELECT DISTINCT a.grantee::regrole
                    FROM pg_class c CROSS JOIN LATERAL aclexplode(c.relacl) a
                   WHERE c.oid = 'mailroom.account_emails'::regclass
                     AND a.privilege_type = 'SELECT' AND a.grantee NOT IN (0, c.relowner)
    LOOP
        EXECUTE format('GRANT SELECT ON mailroom.action_rules TO %s', v_role);
    END LOOP;
END;
$$;
