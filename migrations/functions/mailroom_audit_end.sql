-- Sets how the operator call p_id (mailroom_audit) ended: p_outcome, the status code's name and
-- what the call changed or found (cut to 1000 characters). Only a call still 'started' is
-- changed: an entry's outcome is written once. Called by the collector's API.
CREATE OR REPLACE FUNCTION mailroom.mailroom_audit_end(p_id bigint, p_outcome text) RETURNS void
    LANGUAGE sql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
    UPDATE mailroom.operator_audit SET outcome = left(p_outcome, 1000)
     WHERE id = p_id AND outcome = 'started';
$$;
