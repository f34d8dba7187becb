-- ack_outcome: one outcome of an acknowledgement as mailroom_ack's parts hand it to each other
-- (mailroom_ack_batched, mailroom_ack_rows): the job, the hand-out count it was leased at, the
-- outcome ('sent', 'failed', 'expired', 'retry', 'defer'), its reason, the retry's delay, the
-- SENT cost, the provider's message id and the provider.
CREATE TYPE mailroom.ack_outcome AS (
    id bigint,
    attempt integer,
    outcome text,
    reason text,
    retry_ms integer,
    cost bigint,
    mid text,
    prov text
);
