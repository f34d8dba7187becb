-- Every account email an application sends: the actions table and tokens that reference it.
--
-- Before: tokens.action was the enum token_action (activation, password_recovery), each
-- action's rules written into the functions, their limits in mailroom_settings.
--
-- Now each action is a row of mailroom.actions: whether its email carries a secret (a token
-- the user brings back to mailroom.consume) and a code, the code's length, the token's
-- expiry, the priority class (critical, normal, notice), the account status it needs, and its
-- abuse limits. The built-in rows are inserted here; an operator adds an action of the
-- application's own with one INSERT (docs/sql.md). tokens.action is the action's name, a
-- foreign key to actions.
--
--  * tokens.priority copies the action's class when the token is inserted (the limits
--    trigger; mailroom_collect_signups for activations), so the dequeue's range scans
--    (tokens_priority_txid_id_idx, one cursor per class) read no other table: the class is
--    the range's first column as the action was. A class changed later applies to tokens
--    inserted from then on.
--  * tokens.to_address: the address a token goes to when it is not the account's own (an
--    email_change's new address, pending until consumed; the email_changed notice's old one).
--  * tokens.code: up to 12 digits (login_code's length is its row's code_length, at least 6).
--  * tokens.expires_at has no default any more: the limits trigger sets it from the action's
--    expiry unless the inserter gave one (mailroom_collect_signups gives the activation's).
--  * consumer_groups.notice_*: the notices' cursor (the critical class keeps the recovery
--    cursor, rec_*; lease_batches.recovery and deliveries.recovery mark the critical class).
--  * mailroom_settings keeps its four limit columns: updating one updates the row of its
--    action (trg_after_settings_limits), and the values in force move into the rows now.
--    mailroom_settings.notice_pause_percent: notices are not leased to a group whose month
--    has less than that share of its budget left.
--  * the invitation needs an 'invited' account (0032_invited_status).
-- The function files, applied after this migration, use all of it.

CREATE TYPE action_priority AS ENUM ('critical', 'normal', 'notice');

CREATE TABLE actions (
    name                 TEXT PRIMARY KEY,
    carries_secret       BOOLEAN NOT NULL DEFAULT true,
    carries_code         BOOLEAN NOT NULL DEFAULT false,
    code_length          SMALLINT NOT NULL DEFAULT 6,
    expiry_seconds       INT NOT NULL DEFAULT 86400,
    priority             action_priority NOT NULL DEFAULT 'normal',
    account_status       account_status,   -- required to send and to consume; NULL: any
    limit_per_account    INT DEFAULT 5,    -- NULL: no limit
    limit_per_address    INT DEFAULT 5,
    limit_window_seconds INT,              -- NULL: mailroom_settings.limit_window_seconds
    CONSTRAINT actions_name_check CHECK (name ~ '^[a-z][a-z0-9_]{0,62}$'),
    CONSTRAINT actions_code_check CHECK (carries_secret OR NOT carries_code),
    CONSTRAINT actions_code_length_check
        CHECK (code_length BETWEEN 6 AND 12 OR (name = 'password_recovery' AND code_length = 5)),
    CONSTRAINT actions_expiry_seconds_check CHECK (expiry_seconds > 0),
    CONSTRAINT actions_limit_per_account_check CHECK (limit_per_account >= 0),
    CONSTRAINT actions_limit_per_address_check CHECK (limit_per_address >= 0),
    CONSTRAINT actions_limit_window_seconds_check CHECK (limit_window_seconds > 0),
    -- The two first actions keep their rules (the signup path and the recovery lane rely on
    -- them).
    CONSTRAINT actions_builtin_check CHECK (
        (name <> 'activation' OR (carries_secret AND NOT carries_code
                                  AND priority = 'normal' AND account_status = 'provisioned'))
        AND (name <> 'password_recovery' OR (carries_secret AND carries_code AND code_length = 5
                                             AND priority = 'critical'
                                             AND account_status = 'active')))
);

INSERT INTO actions (name, carries_secret, carries_code, code_length, expiry_seconds, priority,
                     account_status, limit_per_account, limit_per_address, limit_window_seconds)
SELECT v.name, v.secret, v.code, v.len, v.expiry, v.priority::action_priority,
       v.status::account_status, v.acct, v.addr, v.win
  FROM mailroom_settings s
 CROSS JOIN LATERAL (VALUES
    ('activation', true, false, 6, 900, 'normal', 'provisioned',
     s.activation_limit_per_account, s.activation_limit_per_address, NULL::INT),
    ('password_recovery', true, true, 5, 900, 'critical', 'active',
     s.recovery_limit_per_account, s.recovery_limit_per_address, NULL),
    ('login_code', true, true, 6, 600, 'critical', 'active', 5, 10, 3600),
    ('email_change', true, false, 6, 3600, 'critical', 'active', 3, 3, NULL),
    ('invitation', true, false, 6, 604800, 'normal', 'invited', 3, 3, NULL),
    ('password_changed', false, false, 6, 86400, 'notice', NULL, 3, NULL, NULL),
    ('email_changed', false, false, 6, 86400, 'notice', NULL, 3, NULL, NULL),
    ('account_suspended', false, false, 6, 86400, 'notice', NULL, 3, NULL, NULL),
    ('account_reactivated', false, false, 6, 86400, 'notice', NULL, 3, NULL, NULL))
    AS v(name, secret, code, len, expiry, priority, status, acct, addr, win);

ALTER TABLE mailroom_settings
    ADD COLUMN notice_pause_percent INT NOT NULL DEFAULT 20
        CONSTRAINT mailroom_settings_notice_pause_percent_check
        CHECK (notice_pause_percent BETWEEN 0 AND 100);

-- The view reads tokens.action, the index names the enum, and the functions below take or
-- return it: they go (the function and view files create their successors), then the column
-- changes type (one rewrite of tokens and its indexes).
DROP VIEW IF EXISTS account_emails;
DROP INDEX tokens_pending_recovery_idx;
DROP INDEX tokens_action_txid_id_idx;
-- Every function whose parameters or result name the enum (mailroom_dequeue,
-- mailroom_address_limit, mailroom_limit_reason, and any older overload a revert left).
DO $$
DECLARE
    f REGPROCEDURE;
BEGIN
    FOR f IN SELECT DISTINCT d.objid FROM pg_depend d
              WHERE d.classid = 'pg_proc'::regclass
                AND d.refobjid IN ('token_action'::regtype, 'token_action[]'::regtype) LOOP
        EXECUTE format('DROP FUNCTION %s', f);
    END LOOP;
END;
$$;

ALTER TABLE tokens
    ALTER COLUMN action TYPE TEXT USING action::TEXT,
    ALTER COLUMN code TYPE VARCHAR(12),
    DROP CONSTRAINT tokens_code_check,
    ADD CONSTRAINT tokens_code_check CHECK (code ~ '^[0-9]{5,12}$'),
    ALTER COLUMN expires_at DROP DEFAULT,
    ADD COLUMN priority action_priority NOT NULL DEFAULT 'normal',
    ADD COLUMN to_address TEXT;
-- Checked at once, so that the UPDATE leaves no pending trigger event to the ALTERs below.
SET CONSTRAINTS tokens_account_fkey IMMEDIATE;
UPDATE tokens SET priority = 'critical' WHERE action = 'password_recovery';
ALTER TABLE tokens ADD CONSTRAINT tokens_action_fkey FOREIGN KEY (action) REFERENCES actions (name);

ALTER TABLE mailroom_address_requests ALTER COLUMN action TYPE TEXT USING action::TEXT;
DROP TYPE token_action;

-- The dequeue's range per class and cursor; a pending token per account and action (the
-- supersession of a newer request).
CREATE INDEX tokens_priority_txid_id_idx ON tokens (priority, txid, id);
CREATE INDEX tokens_pending_idx ON tokens (account, action)
    WHERE superseded_by IS NULL AND NOT rate_limited AND consumed_at IS NULL
      AND action <> 'activation';

ALTER TABLE consumer_groups
    ADD COLUMN notice_prev_snapshot PG_SNAPSHOT,
    ADD COLUMN notice_cur_snapshot PG_SNAPSHOT,
    ADD COLUMN notice_pos_txid XID8,
    ADD COLUMN notice_pos_id BIGINT;
