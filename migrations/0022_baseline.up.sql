-- The schema at version 0022, the baseline every install starts from: extensions, types,
-- tables, sequences, constraints, indexes and the rows the collector needs. Functions, trigger
-- functions, triggers and views are not here: they live in functions/ and views/ and are
-- applied by `collector migrate` after the versioned migrations (see docs/sql.md).


-- pgcrypto (gen_random_bytes: the tokens' secrets) in mailroom's schema, unless the database
-- already has it elsewhere: it moves there when the migrations' role owns it, else it stays
-- (the tokens' default below names it in its schema).
CREATE EXTENSION IF NOT EXISTS pgcrypto SCHEMA mailroom;
DO $$
BEGIN
    IF (SELECT e.extnamespace <> 'mailroom'::regnamespace
               AND pg_has_role(current_user, e.extowner, 'MEMBER')
          FROM pg_extension e WHERE e.extname = 'pgcrypto') THEN
        ALTER EXTENSION pgcrypto SET SCHEMA mailroom;
    END IF;
END;
$$;

CREATE TYPE account_status AS ENUM (
    'provisioned',
    'active',
    'suspended'
);

CREATE TYPE delivery_state AS ENUM (
    'leased',
    'retry',
    'sent',
    'failed',
    'expired',
    'cancelled',
    'superseded',
    'rate_limited',
    'suppressed'
);

CREATE TYPE token_action AS ENUM (
    'activation',
    'password_recovery'
);

CREATE TABLE tokens (
    id bigint NOT NULL,
    action token_action NOT NULL,
    secret bytea NOT NULL,
    code character varying(5) NOT NULL,
    account bigint NOT NULL,
    expires_at bigint DEFAULT (EXTRACT(epoch FROM (now() + '00:15:00'::interval)))::bigint NOT NULL,
    consumed_at bigint,
    created_at bigint DEFAULT (EXTRACT(epoch FROM now()))::bigint NOT NULL,
    txid xid8 DEFAULT pg_current_xact_id() NOT NULL,
    address text,
    rate_limited boolean DEFAULT false NOT NULL,
    superseded_by bigint,
    suppressed_reason text,
    CONSTRAINT tokens_code_check CHECK (((code)::text ~ '^[0-9]{5}$'::text)),
    CONSTRAINT tokens_secret_check CHECK ((octet_length(secret) = 32))
)
WITH (autovacuum_vacuum_scale_factor='0.02', autovacuum_vacuum_insert_scale_factor='0.02', autovacuum_vacuum_cost_delay='0');

CREATE SEQUENCE tokens_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE tokens_id_seq OWNED BY tokens.id;

ALTER TABLE ONLY tokens ALTER COLUMN id SET DEFAULT nextval('tokens_id_seq'::regclass);

DO $$
BEGIN
    EXECUTE format('ALTER TABLE tokens ALTER COLUMN secret SET DEFAULT %I.gen_random_bytes(32)',
                   (SELECT n.nspname FROM pg_extension e
                      JOIN pg_namespace n ON n.oid = e.extnamespace
                     WHERE e.extname = 'pgcrypto'));
END;
$$;

ALTER TABLE ONLY tokens
    ADD CONSTRAINT tokens_pkey PRIMARY KEY (id);

ALTER TABLE ONLY tokens
    ADD CONSTRAINT tokens_secret_key UNIQUE (secret);

CREATE INDEX tokens_account_idx ON tokens USING btree (account);

CREATE INDEX tokens_action_txid_id_idx ON tokens USING btree (action, txid, id);

CREATE INDEX tokens_limit_account_idx ON tokens USING btree (account, action, created_at) WHERE (NOT rate_limited);

CREATE INDEX tokens_limit_address_idx ON tokens USING btree (address, action, created_at) WHERE (NOT rate_limited);

CREATE INDEX tokens_pending_recovery_idx ON tokens USING btree (account) WHERE ((action = 'password_recovery'::token_action) AND (superseded_by IS NULL) AND (NOT rate_limited) AND (consumed_at IS NULL));

CREATE INDEX tokens_txid_id_idx ON tokens USING btree (txid, id);

CREATE TABLE accounts (
    id bigint NOT NULL,
    email character varying(254) NOT NULL,
    status account_status DEFAULT 'provisioned'::account_status NOT NULL,
    login character varying(254) NOT NULL,
    created_at bigint DEFAULT (EXTRACT(epoch FROM now()))::bigint NOT NULL,
    status_changed_at bigint,
    activated_at bigint,
    suspended_at bigint,
    unsuspended_at bigint,
    locale text,
    CONSTRAINT accounts_locale_bcp47 CHECK (((char_length(locale) <= 35) AND (locale ~ '^[A-Za-z]{2,3}(-[A-Za-z0-9]{2,8})*$'::text)))
);

CREATE SEQUENCE accounts_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE accounts_id_seq OWNED BY accounts.id;

ALTER TABLE ONLY accounts ALTER COLUMN id SET DEFAULT nextval('accounts_id_seq'::regclass);

ALTER TABLE ONLY accounts
    ADD CONSTRAINT accounts_email_key UNIQUE (email);

ALTER TABLE ONLY accounts
    ADD CONSTRAINT accounts_login_key UNIQUE (login);

ALTER TABLE ONLY accounts
    ADD CONSTRAINT accounts_pkey PRIMARY KEY (id);

CREATE INDEX accounts_address_idx ON accounts USING btree (lower(TRIM(BOTH FROM email)));

CREATE TABLE budget_grants (
    id bigint NOT NULL,
    group_id integer NOT NULL,
    month date NOT NULL,
    holder text NOT NULL,
    recovery boolean NOT NULL,
    price_micros bigint NOT NULL,
    emails integer NOT NULL,
    returned_emails integer DEFAULT 0 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    refunded boolean DEFAULT false NOT NULL,
    CONSTRAINT budget_grants_check CHECK (((returned_emails >= 0) AND (returned_emails <= emails))),
    CONSTRAINT budget_grants_emails_check CHECK ((emails > 0)),
    CONSTRAINT budget_grants_price_micros_check CHECK ((price_micros > 0))
);

CREATE SEQUENCE budget_grants_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE budget_grants_id_seq OWNED BY budget_grants.id;

ALTER TABLE ONLY budget_grants ALTER COLUMN id SET DEFAULT nextval('budget_grants_id_seq'::regclass);

ALTER TABLE ONLY budget_grants
    ADD CONSTRAINT budget_grants_pkey PRIMARY KEY (id);

CREATE INDEX budget_grants_holder_idx ON budget_grants USING btree (group_id, holder, expires_at);

CREATE TABLE budget_months (
    group_id integer NOT NULL,
    month date NOT NULL,
    granted_micros bigint DEFAULT 0 NOT NULL,
    returned_micros bigint DEFAULT 0 NOT NULL,
    CONSTRAINT budget_months_check CHECK ((returned_micros <= granted_micros))
);

ALTER TABLE ONLY budget_months
    ADD CONSTRAINT budget_months_pkey PRIMARY KEY (group_id, month);

CREATE TABLE budget_subscriptions (
    group_id integer NOT NULL,
    owner text NOT NULL,
    holder text NOT NULL,
    handed bigint DEFAULT 0 NOT NULL,
    settled_unsent bigint DEFAULT 0 NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT budget_subscriptions_handed_check CHECK ((handed >= 0)),
    CONSTRAINT budget_subscriptions_settled_unsent_check CHECK ((settled_unsent >= 0))
);

ALTER TABLE ONLY budget_subscriptions
    ADD CONSTRAINT budget_subscriptions_pkey PRIMARY KEY (group_id, owner);

CREATE INDEX budget_subscriptions_holder_idx ON budget_subscriptions USING btree (group_id, holder);

CREATE TABLE consumer_groups (
    id integer NOT NULL,
    name text NOT NULL,
    prev_snapshot pg_snapshot NOT NULL,
    cur_snapshot pg_snapshot,
    pos_txid xid8,
    pos_id bigint,
    max_lost_leases integer DEFAULT 5 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    rec_prev_snapshot pg_snapshot,
    rec_cur_snapshot pg_snapshot,
    rec_pos_txid xid8,
    rec_pos_id bigint,
    CONSTRAINT consumer_groups_max_lost_leases_check CHECK ((max_lost_leases > 0)),
    CONSTRAINT consumer_groups_name_check CHECK ((name ~ '^[a-z][a-z0-9_-]{0,62}$'::text))
);

CREATE SEQUENCE consumer_groups_id_seq
    AS integer
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE consumer_groups_id_seq OWNED BY consumer_groups.id;

ALTER TABLE ONLY consumer_groups ALTER COLUMN id SET DEFAULT nextval('consumer_groups_id_seq'::regclass);

ALTER TABLE ONLY consumer_groups
    ADD CONSTRAINT consumer_groups_name_key UNIQUE (name);

ALTER TABLE ONLY consumer_groups
    ADD CONSTRAINT consumer_groups_pkey PRIMARY KEY (id);

CREATE TABLE deliveries (
    group_id integer NOT NULL,
    token_id bigint NOT NULL,
    state delivery_state NOT NULL,
    attempts integer DEFAULT 1 NOT NULL,
    failures integer DEFAULT 0 NOT NULL,
    lost_leases integer DEFAULT 0 NOT NULL,
    owner text,
    due_at timestamp with time zone,
    reason text,
    cost_micros bigint,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    holder_left boolean DEFAULT false NOT NULL,
    recovery boolean DEFAULT false NOT NULL,
    provider_message_id text,
    delivered_at timestamp with time zone,
    bounced_at timestamp with time zone,
    bounce_type text,
    complained_at timestamp with time zone,
    rejected_at timestamp with time zone
)
WITH (autovacuum_vacuum_scale_factor='0.02', autovacuum_vacuum_insert_scale_factor='0.02', autovacuum_vacuum_cost_delay='0');

ALTER TABLE ONLY deliveries
    ADD CONSTRAINT deliveries_pkey PRIMARY KEY (group_id, token_id);

CREATE INDEX deliveries_due_idx ON deliveries USING btree (group_id, due_at) WHERE (state = ANY (ARRAY['leased'::delivery_state, 'retry'::delivery_state]));

CREATE INDEX deliveries_due_recovery_idx ON deliveries USING btree (group_id, due_at) WHERE ((state = ANY (ARRAY['leased'::delivery_state, 'retry'::delivery_state])) AND recovery);

CREATE INDEX deliveries_failed_idx ON deliveries USING btree (group_id, updated_at) WHERE (state = 'failed'::delivery_state);

CREATE INDEX deliveries_owner_idx ON deliveries USING btree (owner) WHERE (state = 'leased'::delivery_state);

CREATE INDEX deliveries_provider_message_idx ON deliveries USING btree (provider_message_id) WHERE (provider_message_id IS NOT NULL);

CREATE TABLE delivery_counts (
    group_id integer NOT NULL,
    state delivery_state NOT NULL,
    n bigint NOT NULL
);

CREATE TABLE lease_batches (
    batch_id bigint NOT NULL,
    group_id integer NOT NULL,
    owner text NOT NULL,
    recovery boolean NOT NULL,
    state text DEFAULT 'leased'::text NOT NULL,
    holder_left boolean DEFAULT false NOT NULL,
    due_at timestamp with time zone NOT NULL,
    ids bigint[] NOT NULL,
    done bit varying NOT NULL,
    kept bit varying NOT NULL,
    acked integer DEFAULT 0 NOT NULL,
    lo_id bigint NOT NULL,
    hi_id bigint NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT lease_batches_state_check CHECK ((state = ANY (ARRAY['leased'::text, 'done'::text, 'expired'::text])))
)
WITH (autovacuum_vacuum_scale_factor='0.02', autovacuum_vacuum_insert_scale_factor='0.02', autovacuum_vacuum_cost_delay='0');

CREATE SEQUENCE lease_batches_batch_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE lease_batches_batch_id_seq OWNED BY lease_batches.batch_id;

ALTER TABLE ONLY lease_batches ALTER COLUMN batch_id SET DEFAULT nextval('lease_batches_batch_id_seq'::regclass);

ALTER TABLE ONLY lease_batches
    ADD CONSTRAINT lease_batches_pkey PRIMARY KEY (batch_id);

CREATE INDEX lease_batches_due_idx ON lease_batches USING btree (group_id, due_at) WHERE (state = 'leased'::text);

CREATE INDEX lease_batches_finished_idx ON lease_batches USING btree (batch_id) WHERE (state <> 'leased'::text);

CREATE INDEX lease_batches_owner_idx ON lease_batches USING btree (owner, group_id) WHERE (state = 'leased'::text);

CREATE INDEX lease_batches_range_idx ON lease_batches USING gist (int8range(lo_id, hi_id, '[]'::text));

CREATE TABLE group_budgets (
    group_id integer NOT NULL,
    monthly_budget_micros bigint,
    recovery_reserve_percent integer,
    burst integer DEFAULT 10 NOT NULL,
    bucket_micros double precision DEFAULT 0 NOT NULL,
    bucket_at timestamp with time zone,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT group_budgets_burst_check CHECK (((burst >= 1) AND (burst <= 100000))),
    CONSTRAINT group_budgets_monthly_budget_micros_check CHECK ((monthly_budget_micros >= 0)),
    CONSTRAINT group_budgets_recovery_reserve_percent_check CHECK (((recovery_reserve_percent >= 0) AND (recovery_reserve_percent <= 100)))
);

ALTER TABLE ONLY group_budgets
    ADD CONSTRAINT group_budgets_pkey PRIMARY KEY (group_id);

CREATE TABLE group_usage (
    group_id integer NOT NULL,
    month date NOT NULL,
    sent bigint DEFAULT 0 NOT NULL,
    cost_micros bigint DEFAULT 0 NOT NULL
);

ALTER TABLE ONLY group_usage
    ADD CONSTRAINT group_usage_pkey PRIMARY KEY (group_id, month);

CREATE TABLE mailroom_settings (
    singleton boolean DEFAULT true NOT NULL,
    channel text DEFAULT 'token_insert'::text NOT NULL,
    recovery_limit_per_account integer DEFAULT 5,
    recovery_limit_per_address integer DEFAULT 5,
    activation_limit_per_account integer DEFAULT 3,
    activation_limit_per_address integer DEFAULT 3,
    limit_window_seconds integer DEFAULT 86400 NOT NULL,
    CONSTRAINT mailroom_settings_activation_limit_per_account_check CHECK ((activation_limit_per_account >= 0)),
    CONSTRAINT mailroom_settings_activation_limit_per_address_check CHECK ((activation_limit_per_address >= 0)),
    CONSTRAINT mailroom_settings_channel_check CHECK ((channel ~ '^[a-z_][a-z0-9_]{0,62}$'::text)),
    CONSTRAINT mailroom_settings_limit_window_seconds_check CHECK ((limit_window_seconds > 0)),
    CONSTRAINT mailroom_settings_recovery_limit_per_account_check CHECK ((recovery_limit_per_account >= 0)),
    CONSTRAINT mailroom_settings_recovery_limit_per_address_check CHECK ((recovery_limit_per_address >= 0)),
    CONSTRAINT mailroom_settings_singleton_check CHECK (singleton)
);

ALTER TABLE ONLY mailroom_settings
    ADD CONSTRAINT mailroom_settings_pkey PRIMARY KEY (singleton);

CREATE TABLE reputation_hourly (
    group_id integer NOT NULL,
    hour timestamp with time zone NOT NULL,
    sent bigint DEFAULT 0 NOT NULL,
    delivered bigint DEFAULT 0 NOT NULL,
    bounced bigint DEFAULT 0 NOT NULL,
    complained bigint DEFAULT 0 NOT NULL
);

CREATE INDEX reputation_hourly_idx ON reputation_hourly USING btree (group_id, hour);

CREATE TABLE sns_messages (
    message_id text NOT NULL,
    type text NOT NULL,
    received_at timestamp with time zone DEFAULT now() NOT NULL
);

ALTER TABLE ONLY sns_messages
    ADD CONSTRAINT sns_messages_pkey PRIMARY KEY (message_id);

CREATE INDEX sns_messages_received_idx ON sns_messages USING btree (received_at);

CREATE TABLE soft_bounces (
    address text NOT NULL,
    bounced_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE INDEX soft_bounces_bounced_at_idx ON soft_bounces USING btree (bounced_at);

CREATE INDEX soft_bounces_idx ON soft_bounces USING btree (address, bounced_at);

CREATE TABLE suppressions (
    address text NOT NULL,
    reason text NOT NULL,
    source text DEFAULT ''::text NOT NULL,
    first_seen timestamp with time zone DEFAULT now() NOT NULL,
    last_seen timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone,
    CONSTRAINT suppressions_address_check CHECK (((address = lower(TRIM(BOTH FROM address))) AND (address <> ''::text))),
    CONSTRAINT suppressions_reason_check CHECK ((reason = ANY (ARRAY['hard_bounce'::text, 'complaint'::text, 'smtp_rejected'::text, 'manual'::text])))
);

ALTER TABLE ONLY suppressions
    ADD CONSTRAINT suppressions_pkey PRIMARY KEY (address);

ALTER TABLE ONLY budget_grants
    ADD CONSTRAINT budget_grants_group_id_fkey FOREIGN KEY (group_id) REFERENCES consumer_groups(id) ON DELETE CASCADE;

ALTER TABLE ONLY budget_months
    ADD CONSTRAINT budget_months_group_id_fkey FOREIGN KEY (group_id) REFERENCES consumer_groups(id) ON DELETE CASCADE;

ALTER TABLE ONLY budget_subscriptions
    ADD CONSTRAINT budget_subscriptions_group_id_fkey FOREIGN KEY (group_id) REFERENCES consumer_groups(id) ON DELETE CASCADE;

ALTER TABLE ONLY group_budgets
    ADD CONSTRAINT group_budgets_group_id_fkey FOREIGN KEY (group_id) REFERENCES consumer_groups(id) ON DELETE CASCADE;

ALTER TABLE ONLY group_usage
    ADD CONSTRAINT group_usage_group_id_fkey FOREIGN KEY (group_id) REFERENCES consumer_groups(id) ON DELETE CASCADE;

ALTER TABLE ONLY reputation_hourly
    ADD CONSTRAINT reputation_hourly_group_id_fkey FOREIGN KEY (group_id) REFERENCES consumer_groups(id) ON DELETE CASCADE;

ALTER TABLE ONLY tokens
    ADD CONSTRAINT tokens_account_fkey FOREIGN KEY (account) REFERENCES accounts(id) ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED;

-- The one settings row and the default consumer group.
INSERT INTO mailroom_settings DEFAULT VALUES;
INSERT INTO consumer_groups (name, prev_snapshot) VALUES ('mailroom', '1:1:');
