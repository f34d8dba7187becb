-- True when a token may be sent: not expired, not consumed, account in the status its action
-- needs (mailroom.actions.account_status; NULL: any). Activation (provisioned) and password
-- recovery (active), whose rows cannot change those, are decided without reading the actions
-- table (the drain's bulk); the others with one probe of its primary key. Inlined into its
-- callers, so no SET search_path (a function with settings is never inlined): it is called
-- only from mailroom's functions, whose pinned search path it then runs under, and it names
-- mailroom's tables schema-qualified.
CREATE OR REPLACE FUNCTION mailroom.mailroom_token_sendable(t tokens, a_status account_status, now_epoch bigint) RETURNS boolean
    LANGUAGE sql STABLE
    AS $$
    SELECT t.expires_at > now_epoch AND t.consumed_at IS NULL
       AND CASE t.action
               WHEN 'activation' THEN a_status = 'provisioned'
               WHEN 'password_recovery' THEN a_status = 'active'
               ELSE coalesce((SELECT x.account_status = a_status FROM mailroom.actions x
                               WHERE x.name = t.action), true)
           END;
$$;
