-- Counts the outcomes that updated deliveries rows reach, as trg_deliveries_count_insert, and
-- stages the event of each row that goes from leased or retry to sent, failed, expired or
-- suppressed, and of each leased row whose failures grew (a RETRY outcome: 'retried'), with the
-- ledger's columns: the group, the hand-out count, the subscription that acknowledged it
-- (mailroom_ack's setting mailroom.subscriber; NULL for what no subscriber reported, such as an
-- expiry), the provider, message id and cost of a sent row. Fired once per UPDATE statement on
-- deliveries (transition tables allow one event per trigger). The collector deletes deliveries
-- only by pruning, which must not change counts.
CREATE OR REPLACE FUNCTION mailroom.trg_deliveries_count_update() RETURNS trigger
    LANGUAGE plpgsql
    SECURITY DEFINER
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
BEGIN
    INSERT INTO delivery_counts (group_id, state, n)
    SELECT x.group_id, x.state, sum(x.n) FROM (
        SELECT o.group_id, o.state, -1 AS n FROM old_rows o WHERE mailroom_finished_state(o.state)
        UNION ALL
        SELECT r.group_id, r.state, 1 AS n FROM new_rows r WHERE mailroom_finished_state(r.state)
    ) x
     GROUP BY x.group_id, x.state
    HAVING sum(x.n) <> 0;
    INSERT INTO email_events_staged (token_id, event, detail, group_id, handout, subscriber,
                                     provider, provider_message_id, cost_micros)
    SELECT r.token_id, CASE WHEN r.state = 'retry' THEN 'retried' ELSE r.state::TEXT END,
           CASE WHEN r.state = 'sent' THEN r.provider ELSE r.reason END, r.group_id, r.attempts,
           NULLIF(current_setting('mailroom.subscriber', true), ''), CASE WHEN r.state = 'sent' THEN r.provider END,
           CASE WHEN r.state = 'sent' THEN r.provider_message_id END, r.cost_micros
      FROM new_rows r JOIN old_rows o ON o.group_id = r.group_id AND o.token_id = r.token_id
     WHERE (r.state IN ('sent', 'failed', 'expired', 'suppressed')
            AND o.state IN ('leased', 'retry'))
        OR (r.state = 'retry' AND o.state = 'leased' AND r.failures > o.failures);
    RETURN NULL;
END;
$$;

CREATE OR REPLACE TRIGGER deliveries_count_update AFTER UPDATE ON mailroom.deliveries REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION mailroom.trg_deliveries_count_update();
