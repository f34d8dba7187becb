-- The application reads each action's rules through the view mailroom.action_rules (its file in
-- views/, granted by mailroom.grant_application), and mailroom.account_emails gains sent_at
-- (its file). No table changes: this version exists so that going back before it drops the
-- new view, which depends on mailroom.actions and mailroom_settings.
SELECT 1;
