-- Fewer indexes for the application's signup to write: every token insert runs inside the
-- application's transaction and writes one entry per index of tokens.
--
--  * tokens_account_idx (account) and tokens_limit_account_idx (account, action, created_at)
--    WHERE NOT rate_limited become one index, tokens_account_action_idx (account, action,
--    created_at) over every token: it serves the account's limit count (rate-limited rows
--    filtered from the heap: a few per account), the status trigger's look-up of an account's
--    activation and the cascade when an account is deleted.
--  * tokens_txid_id_idx (txid, id) is dropped: its only reader, mailroom_ensure_group's search
--    for the earliest unexpired token, reads tokens_action_txid_id_idx once per action.

CREATE INDEX tokens_account_action_idx ON tokens (account, action, created_at);
DROP INDEX tokens_account_idx;
DROP INDEX tokens_limit_account_idx;
DROP INDEX tokens_txid_id_idx;
