-- Records the start of one operator call in operator_audit, before it runs: p_credential (who:
-- the credential's name, never a secret), p_method (the call), p_group (its consumer group, ''
-- for a call on every group's list) and p_target (what it is about: an address, an account,
-- job ids, with the reason the operator gave); its outcome is 'started' until
-- mailroom_audit_end sets it. Texts are cut to 1000 characters. Called by the collector's API.
-- Returns the entry's id.
CREATE OR REPLACE FUNCTION mailroom.mailroom_audit(p_credential text, p_method text, p_group text, p_target text) RETURNS bigint
    LANGUAGE sql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
    INSERT INTO mailroom.operator_audit (credential, method, consumer_group, target)
    VALUES (left(p_credential, 1000), left(p_method, 100), left(coalesce(p_group, ''), 1000),
            left(coalesce(p_target, ''), 1000))
    RETURNING id;
$$;
