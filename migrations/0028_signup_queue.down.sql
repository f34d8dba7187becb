-- Back before 0028: the account's trigger creates the activation token in the application's
-- transaction. Queued signups become tokens here first (the limits trigger decides them), then
-- the previous trigger function is put back (not left to the source files) so that the
-- application's inserts keep working until the next `collector migrate up`. Signups wait for
-- the lock meanwhile, so none is queued after the queue was read and before it is dropped. A
-- collection still running is waited for (its rows are taken once, by it or here); the queue is
-- locked after accounts, the order in which a signup takes them.
LOCK TABLE accounts IN SHARE ROW EXCLUSIVE MODE;
LOCK TABLE mailroom_signups IN ACCESS EXCLUSIVE MODE;
INSERT INTO tokens (account, action, created_at)
SELECT s.account, 'activation', s.requested_at
  FROM mailroom_signups s JOIN accounts a ON a.id = s.account
 WHERE a.status = 'provisioned'
   AND NOT EXISTS (SELECT 1 FROM tokens t
                    WHERE t.account = s.account AND t.action = 'activation'
                      AND t.consumed_at IS NULL
                      AND t.expires_at > EXTRACT(EPOCH FROM now()));

DROP TABLE mailroom_signups;
DROP FUNCTION IF EXISTS mailroom_collect_signups(INT);
DO $$
BEGIN
    IF to_regprocedure('trg_wake_collector()') IS NOT NULL THEN
        ALTER FUNCTION trg_wake_collector() RENAME TO trg_after_token_inserted;
    END IF;
END;
$$;

CREATE OR REPLACE FUNCTION trg_before_account_insert() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_address      TEXT;
    v_acct_limit   INT;
    v_addr_limit   INT;
    v_window       INT;
    v_reason       TEXT;
BEGIN
    IF (NEW.status = 'provisioned') THEN
        v_address := lower(trim(NEW.email));
        SELECT s.activation_limit_per_account, s.activation_limit_per_address,
               s.limit_window_seconds
          INTO v_acct_limit, v_addr_limit, v_window
          FROM mailroom_settings s;
        IF v_acct_limit = 0 THEN
            v_reason := format(
                'rate limited: 0 activation requests for this account in the last %s s (limit 0)',
                v_window);
        ELSIF v_addr_limit IS NOT NULL THEN
            v_reason := mailroom_address_limit(v_address, 'activation',
                                               EXTRACT(EPOCH FROM now())::BIGINT,
                                               v_addr_limit, v_window);
        END IF;
        INSERT INTO tokens (account, action, address, rate_limited, suppressed_reason)
        VALUES (NEW.id, 'activation', v_address, v_reason IS NOT NULL, v_reason);
    END IF;
    RETURN NEW;
END;
$$;

CREATE OR REPLACE TRIGGER before_account_insert BEFORE INSERT ON accounts FOR EACH ROW EXECUTE FUNCTION trg_before_account_insert();

-- The limits trigger skips the tokens that function decides itself (when its function exists:
-- a database whose function files were never applied has neither).
DO $$
BEGIN
    IF to_regprocedure('trg_before_token_insert_limits()') IS NOT NULL THEN
        CREATE OR REPLACE TRIGGER before_token_insert_limits BEFORE INSERT ON tokens FOR EACH ROW
            WHEN (NEW.address IS NULL OR pg_trigger_depth() = 0)
            EXECUTE FUNCTION trg_before_token_insert_limits();
    END IF;
END;
$$;
