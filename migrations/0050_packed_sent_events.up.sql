-- The plain SENT events staged packed: the plain SENT outcomes (no provider message id) of one
-- mailroom_ack call stage one row of email_events_staged_sent per provider and cost (usually
-- one per call) carrying the tokens' ids as an array, instead of one row of
-- email_events_staged per email (about 110 bytes of WAL each, and 54 more for its delete at
-- publish). The publisher (functions/mailroom_publish_events.sql) unpacks each row into one
-- 'sent' event per token, numbered with the per-row staged events of the same publish, in the
-- same order (at, token_id), so the feed's rows are those the per-row staging gave; the
-- ledger's readers (email_history, mailroom_email_ledger) read the packed rows as the staged
-- events they stand for. What a row stands for, per token: event 'sent', detail and provider
-- the row's provider, the ledger's group_id, handout, subscriber and cost_micros, no provider
-- message id, and the row's `at`. `emails` is the number of its ids, so that a publish counts
-- its rows' events without reading their arrays (stored out of line from a few hundred ids).
-- Insert only, no index or key of its own, as email_events_staged; a row is deleted whole by
-- the publish that numbers its events. The functions that write and
-- read it are in their source files, applied after this migration (docs/design.md, "The event
-- feed").
CREATE TABLE mailroom.email_events_staged_sent (
    group_id integer NOT NULL,
    handout integer NOT NULL,
    subscriber text,
    provider text,
    cost_micros bigint,
    token_ids bigint[] NOT NULL,
    emails integer NOT NULL CHECK (emails > 0),
    at timestamptz NOT NULL DEFAULT now()
) WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 100,
        autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 100,
        autovacuum_vacuum_cost_delay = 0,
        toast.autovacuum_vacuum_scale_factor = 0, toast.autovacuum_vacuum_threshold = 100,
        toast.autovacuum_vacuum_insert_scale_factor = 0,
        toast.autovacuum_vacuum_insert_threshold = 100, toast.autovacuum_vacuum_cost_delay = 0);
