-- True when a token may be sent: not expired, not consumed, account in the right status.
-- Inlined into its callers, so no SET search_path (a function with settings is never inlined):
-- it is called only from mailroom's functions, whose pinned search path it then runs under,
-- and it names mailroom's tables schema-qualified.
CREATE OR REPLACE FUNCTION mailroom.mailroom_token_sendable(t tokens, a_status account_status, now_epoch bigint) RETURNS boolean
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT t.expires_at > now_epoch AND t.consumed_at IS NULL
       AND ((t.action = 'activation' AND a_status = 'provisioned')
         OR (t.action = 'password_recovery' AND a_status = 'active'));
$$;
