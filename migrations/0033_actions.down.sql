-- Back to the two actions of the enum token_action. Tokens of any other action are deleted
-- (their deliveries keep their rows); invited accounts stay (0032's down makes them
-- provisioned). The four limit
-- columns of mailroom_settings take the values of their actions' rows. The previous release's
-- function files (applied by its `collector migrate`) recreate the functions dropped here.
DROP VIEW IF EXISTS account_emails;
DROP FUNCTION IF EXISTS mailroom_dequeue(TEXT, INT, TEXT, INT, BOOLEAN, BIGINT);
DROP FUNCTION IF EXISTS mailroom_address_limit(TEXT[], BIGINT[], TEXT, INT, INT);
DROP FUNCTION IF EXISTS mailroom_limit_reason(INT, TEXT, TEXT, INT, INT);
DROP TRIGGER IF EXISTS after_settings_limits ON mailroom_settings;
DROP FUNCTION IF EXISTS trg_after_settings_limits();

UPDATE mailroom_settings s
   SET activation_limit_per_account = a.limit_per_account,
       activation_limit_per_address = a.limit_per_address
  FROM actions a WHERE a.name = 'activation';
UPDATE mailroom_settings s
   SET recovery_limit_per_account = a.limit_per_account,
       recovery_limit_per_address = a.limit_per_address
  FROM actions a WHERE a.name = 'password_recovery';
ALTER TABLE mailroom_settings DROP COLUMN notice_pause_percent;

DELETE FROM tokens WHERE action NOT IN ('activation', 'password_recovery');
DELETE FROM mailroom_address_requests WHERE action NOT IN ('activation', 'password_recovery');

DROP INDEX tokens_priority_txid_id_idx;
DROP INDEX tokens_pending_idx;
CREATE TYPE token_action AS ENUM ('activation', 'password_recovery');
ALTER TABLE tokens
    DROP CONSTRAINT tokens_action_fkey,
    ALTER COLUMN action TYPE token_action USING action::token_action,
    DROP CONSTRAINT tokens_code_check,
    ALTER COLUMN code TYPE VARCHAR(5),
    ADD CONSTRAINT tokens_code_check CHECK (code ~ '^[0-9]{5}$'),
    ALTER COLUMN expires_at SET DEFAULT EXTRACT(EPOCH FROM now() + INTERVAL '15 minutes')::BIGINT,
    DROP COLUMN priority,
    DROP COLUMN to_address;
ALTER TABLE mailroom_address_requests
    ALTER COLUMN action TYPE token_action USING action::token_action;
CREATE INDEX tokens_action_txid_id_idx ON tokens (action, txid, id);
CREATE INDEX tokens_pending_recovery_idx ON tokens (account)
    WHERE action = 'password_recovery' AND superseded_by IS NULL AND NOT rate_limited
      AND consumed_at IS NULL;

ALTER TABLE consumer_groups
    DROP COLUMN notice_prev_snapshot,
    DROP COLUMN notice_cur_snapshot,
    DROP COLUMN notice_pos_txid,
    DROP COLUMN notice_pos_id;
DROP TABLE actions;
DROP TYPE action_priority;
