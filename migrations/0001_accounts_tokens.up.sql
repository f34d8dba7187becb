-- Accounts, tokens and their triggers (seeds 000/001), with the seeds' defects fixed:
--  * timestamps are BIGINT Unix seconds (INTEGER overflows in 2038);
--  * the 5-digit code comes from gen_random_bytes (pgcrypto), uniformly, never RANDOM();
--  * the NOTIFY channel is one setting (mailroom_settings.channel) read by the trigger and the
--    collector alike;
--  * an account un-suspended back to 'provisioned' (never activated) gets a fresh activation
--    token, since its old one has most likely expired.
CREATE EXTENSION IF NOT EXISTS pgcrypto;

-- One-row table of settings shared by the triggers and the collector.
CREATE TABLE mailroom_settings (
    singleton BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (singleton),
    channel   TEXT NOT NULL DEFAULT 'token_insert'
        CHECK (channel ~ '^[a-z_][a-z0-9_]{0,62}$')
);
INSERT INTO mailroom_settings DEFAULT VALUES;

CREATE TYPE account_status AS ENUM ('provisioned', 'active', 'suspended');

CREATE TABLE accounts (
    id                BIGSERIAL PRIMARY KEY,
    email             VARCHAR(254) UNIQUE NOT NULL,
    status            account_status DEFAULT 'provisioned' NOT NULL,
    login             VARCHAR(254) UNIQUE NOT NULL,
    created_at        BIGINT DEFAULT EXTRACT(EPOCH FROM NOW())::BIGINT NOT NULL,
    status_changed_at BIGINT,
    activated_at      BIGINT,
    suspended_at      BIGINT,
    unsuspended_at    BIGINT
);

CREATE TYPE token_action AS ENUM ('activation', 'password_recovery');

-- A uniformly distributed 5-digit code from a cryptographic source. Rejection sampling over
-- 32 random bits: 4294900000 is the largest multiple of 100000 below 2^32.
CREATE FUNCTION mailroom_random_code() RETURNS VARCHAR(5)
    LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    n BIGINT;
BEGIN
    LOOP
        n := ('x' || encode(gen_random_bytes(4), 'hex'))::BIT(32)::BIGINT;
        IF n < 4294900000 THEN
            RETURN lpad((n % 100000)::TEXT, 5, '0');
        END IF;
    END LOOP;
END;
$$;

CREATE TABLE tokens (
    id          BIGSERIAL PRIMARY KEY,
    action      token_action NOT NULL,
    secret      BYTEA DEFAULT gen_random_bytes(32) UNIQUE NOT NULL
        CHECK (octet_length(secret) = 32),
    code        VARCHAR(5) DEFAULT mailroom_random_code() NOT NULL
        CHECK (code ~ '^[0-9]{5}$'),
    account     BIGINT NOT NULL,
    expires_at  BIGINT DEFAULT EXTRACT(EPOCH FROM NOW() + INTERVAL '15 minute')::BIGINT NOT NULL,
    consumed_at BIGINT,
    created_at  BIGINT DEFAULT EXTRACT(EPOCH FROM NOW())::BIGINT NOT NULL,

    FOREIGN KEY (account) REFERENCES accounts (id) ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED
);
CREATE INDEX tokens_account_idx ON tokens (account);

-- 1. A provisioned account gets an activation token in the same transaction (BEFORE, so a
--    failed token insert rolls the account back too; the FK is deferred for that reason).
CREATE FUNCTION trg_before_account_insert() RETURNS TRIGGER
    LANGUAGE plpgsql AS $$
BEGIN
    IF (NEW.status = 'provisioned') THEN
        INSERT INTO tokens (account, action) VALUES (NEW.id, 'activation');
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER before_account_insert
    BEFORE INSERT ON accounts
    FOR EACH ROW
    EXECUTE FUNCTION trg_before_account_insert();

-- 2. Status changes maintain the lifecycle timestamps.
CREATE FUNCTION trg_before_account_status_change() RETURNS TRIGGER
    LANGUAGE plpgsql AS $$
DECLARE
    ts BIGINT := EXTRACT(EPOCH FROM NOW())::BIGINT;
BEGIN
    IF (NEW.status = OLD.status) THEN
        RETURN NEW;
    END IF;

    NEW.status_changed_at = ts;

    IF (NEW.status = 'active') THEN
        IF (OLD.status = 'provisioned') THEN
            NEW.activated_at = ts;
        ELSIF (OLD.status = 'suspended') THEN
            NEW.unsuspended_at = ts;
            NEW.suspended_at = NULL;
            -- Never activated: back to 'provisioned'.
            IF (OLD.activated_at IS NULL) THEN
                NEW.status = 'provisioned';
            END IF;
        END IF;
    ELSIF (NEW.status = 'suspended') THEN
        NEW.suspended_at = ts;
        NEW.unsuspended_at = NULL;
    ELSIF (NEW.status = 'provisioned' AND OLD.status = 'suspended') THEN
        NEW.unsuspended_at = ts;
        NEW.suspended_at = NULL;
    END IF;

    -- A provisioned account must be able to activate: issue a fresh activation token unless
    -- a live one exists.
    IF (NEW.status = 'provisioned' AND OLD.status = 'suspended'
        AND NOT EXISTS (SELECT 1 FROM tokens t
                         WHERE t.account = NEW.id AND t.action = 'activation'
                           AND t.consumed_at IS NULL
                           AND t.expires_at > EXTRACT(EPOCH FROM NOW()))) THEN
        INSERT INTO tokens (account, action) VALUES (NEW.id, 'activation');
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER before_account_status_change
    BEFORE UPDATE OF status ON accounts
    FOR EACH ROW
    EXECUTE FUNCTION trg_before_account_status_change();

-- 3. Consuming an activation token activates its account.
CREATE FUNCTION trg_after_token_consumed() RETURNS TRIGGER
    LANGUAGE plpgsql AS $$
BEGIN
    IF (NEW.action != 'activation') THEN
        RETURN NULL;
    END IF;
    UPDATE accounts SET status = 'active' WHERE id = NEW.account AND status = 'provisioned';
    RETURN NULL;
END;
$$;

CREATE TRIGGER after_token_consumed
    AFTER UPDATE OF consumed_at ON tokens
    FOR EACH ROW
    WHEN (NEW.consumed_at IS NOT NULL AND OLD.consumed_at IS NULL)
    EXECUTE FUNCTION trg_after_token_consumed();

-- 4. New tokens wake the collector. Once per statement: NOTIFY is only a wake-up signal
--    (PostgreSQL folds identical notifications of one transaction anyway).
CREATE FUNCTION trg_after_token_inserted() RETURNS TRIGGER
    LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify((SELECT channel FROM mailroom_settings), '');
    RETURN NULL;
END;
$$;

CREATE TRIGGER after_token_inserted
    AFTER INSERT ON tokens
    FOR EACH STATEMENT
    EXECUTE FUNCTION trg_after_token_inserted();
