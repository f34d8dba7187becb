-- True when a token may be sent: not expired, not consumed, account in the right status.

CREATE OR REPLACE FUNCTION mailroom.mailroom_token_sendable(t tokens, a_status account_status, now_epoch bigint) RETURNS boolean
    LANGUAGE sql IMMUTABLE
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
    SELECT t.expires_at > now_epoch AND t.consumed_at IS NULL
       AND ((t.action = 'activation' AND a_status = 'provisioned')
         OR (t.action = 'password_recovery' AND a_status = 'active'));
$$;
