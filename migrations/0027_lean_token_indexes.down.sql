-- Back before 0027: the account index, the partial limit index and the (txid, id) index.
CREATE INDEX tokens_account_idx ON tokens USING btree (account);
CREATE INDEX tokens_limit_account_idx ON tokens USING btree (account, action, created_at)
    WHERE (NOT rate_limited);
CREATE INDEX tokens_txid_id_idx ON tokens USING btree (txid, id);
DROP INDEX tokens_account_action_idx;

-- The wake-up trigger as before 0027 (the mark read in its function, not in a WHEN that
-- depends on the sequence, which 0025's down drops). The function files put the current one
-- back on the next `collector migrate up`.
CREATE OR REPLACE FUNCTION trg_after_token_inserted() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF (SELECT last_value FROM mailroom_idle_collectors) > 0 THEN
        PERFORM pg_notify((SELECT channel FROM mailroom_settings), '');
    END IF;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE TRIGGER after_token_inserted AFTER INSERT ON tokens FOR EACH STATEMENT EXECUTE FUNCTION trg_after_token_inserted();
