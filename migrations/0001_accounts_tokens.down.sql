DROP TABLE IF EXISTS tokens;
DROP TABLE IF EXISTS accounts;
DROP FUNCTION IF EXISTS trg_after_token_inserted();
DROP FUNCTION IF EXISTS trg_after_token_consumed();
DROP FUNCTION IF EXISTS trg_before_account_status_change();
DROP FUNCTION IF EXISTS trg_before_account_insert();
DROP FUNCTION IF EXISTS mailroom_random_code();
DROP TYPE IF EXISTS token_action;
DROP TYPE IF EXISTS account_status;
DROP TABLE IF EXISTS mailroom_settings;
-- pgcrypto is left installed: other schemas may use it.
