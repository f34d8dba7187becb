-- Counts the outcomes of inserted deliveries rows in delivery_counts (one delta row per group
-- and state; mailroom_compact_delivery_counts folds them), and stages the event of each row
-- inserted failed, expired or suppressed, or sent with the provider's message id (mailroom_ack's
-- kept SENT outcomes; a sent row without one is a batch's outcome given a row by
-- mailroom_batch_keep_sent, staged when it was acknowledged), or retry after a failure (a
-- batch's RETRY outcome: 'retried') in email_events_staged, with the ledger's columns: the
-- group, the hand-out count, the subscription acknowledging (mailroom_ack names it in the transaction's
-- setting mailroom.subscriber; NULL outside an acknowledgement), the provider, message id and
-- cost of a sent row. Fired once per INSERT statement on deliveries (transition table).
CREATE OR REPLACE FUNCTION mailroom.trg_deliveries_count_insert() RETURNS trigger
    LANGUAGE plpgsql
    SECURITY DEFINER
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
BEGIN
    INSERT INTO delivery_counts (group_id, state, n)
    SELECT r.group_id, r.state, count(*) FROM new_rows r
     WHERE mailroom_finished_state(r.state)
     GROUP BY r.group_id, r.state;
    INSERT INTO email_events_staged (token_id, event, detail, group_id, handout, subscriber,
                                     provider, provider_message_id, cost_micros)
    SELECT r.token_id, CASE WHEN r.state = 'retry' THEN 'retried' ELSE r.state::TEXT END,
           CASE WHEN r.state = 'sent' THEN r.provider ELSE r.reason END, r.group_id, r.attempts,
           NULLIF(current_setting('mailroom.subscriber', true), ''), r.provider,
           r.provider_message_id, r.cost_micros
      FROM new_rows r
     WHERE r.state IN ('failed', 'expired', 'suppressed')
        OR (r.state = 'sent' AND r.provider_message_id IS NOT NULL)
        OR (r.state = 'retry' AND r.failures > 0);
    RETURN NULL;
END;
$$;

CREATE OR REPLACE TRIGGER deliveries_count_insert AFTER INSERT ON mailroom.deliveries REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION mailroom.trg_deliveries_count_insert();
