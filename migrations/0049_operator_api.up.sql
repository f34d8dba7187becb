-- The operator's API: the audit, and a group paused by an operator.
--
-- The audit: every operator call of the collector's API that reads an address's
-- emails or the queue's failures, or changes something (docs/security.md, "The operator API"):
-- who (the credential's name, never a secret), when, which call, in which group, on what, and
-- how it ended. The collector records each call before it runs (mailroom_audit: a call whose
-- record cannot be written does not run) and sets its outcome when it ends
-- (mailroom_audit_end; 'started' is left by a collector that stopped mid-call). Read by
-- ListAudit, pruned by the retention pass after mailroom_settings.audit_retention_days (365 by
-- default, at least 1) with mailroom_prune_operator_audit.
CREATE TABLE mailroom.operator_audit (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at timestamptz NOT NULL DEFAULT now(),
    credential text NOT NULL,
    method text NOT NULL,
    consumer_group text NOT NULL DEFAULT '',
    target text NOT NULL DEFAULT '',
    outcome text NOT NULL DEFAULT 'started'
);

ALTER TABLE mailroom.mailroom_settings
    ADD COLUMN audit_retention_days integer NOT NULL DEFAULT 365
        CONSTRAINT mailroom_settings_audit_retention_days_check CHECK (audit_retention_days >= 1);

-- A group paused by an operator (PauseGroup, mailroom_pause_group): mailroom_dequeue hands out
-- none of its jobs while paused_at is set, on every collector; jobs already leased stay their
-- holders' and the retention expires tokens as always. Added without a table rewrite.
ALTER TABLE mailroom.consumer_groups ADD COLUMN paused_at timestamptz, ADD COLUMN paused_reason text;
