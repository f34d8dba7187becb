-- True when a token may be sent: not expired, not consumed, account in the status its action
-- needs (`p_needed`, the action's mailroom.actions.account_status, which the caller read once
-- per call; NULL: any). One expression without a sub-select, so PostgreSQL inlines it into its
-- callers' plans (a sub-select, or any setting such as SET search_path, would make it a
-- function call per row, about 10 us each in the dequeue's window); no SET search_path for
-- that reason: it is called only from mailroom's functions, under their pinned search path.
CREATE OR REPLACE FUNCTION mailroom.mailroom_token_sendable(t tokens, a_status account_status, now_epoch bigint, p_needed account_status) RETURNS boolean
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT t.expires_at > now_epoch AND t.consumed_at IS NULL
       AND a_status = coalesce(p_needed, a_status);
$$;
