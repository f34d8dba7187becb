-- The application's event feed and idempotent requests.
--
-- email_events_staged: what the hot paths append (the deliveries triggers, mailroom_ack's
-- plain SENT outcomes, mailroom_record_feedback): insert only, no index, no key. The
-- publisher (functions/mailroom_publish_events.sql, called by the collector about once a
-- second) moves the staged rows it sees into email_events under the row lock of
-- email_event_publisher, numbering them from email_events_event_id_seq; only it numbers
-- events, so event ids become visible in their order (docs/design.md, "The event feed").
-- email_events is read by the application through mailroom.email_events and pruned after
-- mailroom_settings.event_retention_days (7 by default, at least 1).
--
-- tokens.idempotency_key: the key a request gave (mailroom.request's p_idempotency_key), looked
-- up per account through a partial index that holds only keyed tokens. mailroom.request takes
-- the key as a new last parameter; its previous signature is dropped when its file is applied
-- after this migration (the rights roles held on it are given on the new one there).
CREATE TABLE mailroom.email_events_staged (
    token_id bigint NOT NULL,
    event text NOT NULL,
    detail text,
    at timestamptz NOT NULL DEFAULT now()
) WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000,
        autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 1000,
        autovacuum_vacuum_cost_delay = 0);

CREATE SEQUENCE mailroom.email_events_event_id_seq AS bigint CACHE 1;

CREATE TABLE mailroom.email_events (
    event_id bigint PRIMARY KEY,
    token_id bigint NOT NULL,
    account bigint NOT NULL,
    action text NOT NULL,
    event text NOT NULL CONSTRAINT email_events_event_check
        CHECK (event IN ('sent', 'delivered', 'bounced', 'complained', 'failed', 'suppressed',
                         'expired')),
    at timestamptz NOT NULL,
    detail text
);
ALTER SEQUENCE mailroom.email_events_event_id_seq OWNED BY mailroom.email_events.event_id;

-- The publishers' turn: a row lock on its only row (UPDATE rights, which only mailroom's roles
-- have, are needed to take it).
CREATE TABLE mailroom.email_event_publisher (
    singleton boolean PRIMARY KEY DEFAULT true CONSTRAINT email_event_publisher_singleton_check
        CHECK (singleton)
);
INSERT INTO mailroom.email_event_publisher DEFAULT VALUES;

ALTER TABLE mailroom.mailroom_settings
    ADD COLUMN event_retention_days integer NOT NULL DEFAULT 7
        CONSTRAINT mailroom_settings_event_retention_days_check CHECK (event_retention_days >= 1);

ALTER TABLE mailroom.tokens ADD COLUMN idempotency_key text;
CREATE INDEX tokens_idempotency_key_idx ON mailroom.tokens (account, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
