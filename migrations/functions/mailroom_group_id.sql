-- The id of consumer group p_group; raises no_data_found ('unknown consumer group "NAME"',
-- which the collector answers NOT_FOUND) when there is none. Called by the operator's reads
-- (mailroom_find_emails, mailroom_group_hourly, mailroom_group_trouble, and FindEmails's read
-- of mailroom_email_ledger).
CREATE OR REPLACE FUNCTION mailroom.mailroom_group_id(p_group text) RETURNS integer
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
DECLARE
    v_gid INT;
BEGIN
    SELECT g.id INTO v_gid FROM consumer_groups g WHERE g.name = p_group;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown consumer group "%"', p_group USING ERRCODE = 'no_data_found';
    END IF;
    RETURN v_gid;
END;
$$;
