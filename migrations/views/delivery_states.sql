-- The per-job picture: every deliveries row, and every lease batch job without a row of its own:
-- SENT (outcome recorded in the batch) or still leased under the batch. A batch job with a row of
-- its own (kept) is that row, and is gone with it once the row is pruned. Read by operators and
-- the schema's tests; nothing in the services reads it. Same columns as deliveries; one row per
-- job and group.
CREATE OR REPLACE VIEW delivery_states AS
SELECT d.group_id, d.token_id, d.state, d.attempts, d.failures, d.lost_leases, d.owner, d.due_at,
       d.reason, d.cost_micros, d.updated_at, d.holder_left, d.recovery, d.provider_message_id,
       d.delivered_at, d.bounced_at, d.bounce_type, d.complained_at, d.rejected_at, d.provider
  FROM deliveries d
UNION ALL
SELECT b.group_id, u.id,
       CASE WHEN u.bit = 1 THEN 'sent' ELSE 'leased' END::delivery_state,
       1, 0, 0,
       CASE WHEN u.bit = 0 THEN b.owner END,
       CASE WHEN u.bit = 0 THEN b.due_at END,
       NULL::TEXT, NULL::BIGINT, b.updated_at,
       b.holder_left AND u.bit = 0, b.recovery, NULL::TEXT,
       NULL::TIMESTAMPTZ, NULL::TIMESTAMPTZ, NULL::TEXT, NULL::TIMESTAMPTZ, NULL::TIMESTAMPTZ, NULL::TEXT
  FROM lease_batches b
 CROSS JOIN LATERAL (SELECT x.id, get_bit(b.done, x.slot::INT - 1) AS bit,
                            get_bit(b.kept, x.slot::INT - 1) AS kept
                       FROM unnest(b.ids) WITH ORDINALITY AS x(id, slot)) u
 WHERE u.kept = 0 AND (u.bit = 1 OR b.state = 'leased');
