-- mailroom_dequeue for a subscription p_owner that spends the budget grants of holder p_holder:
-- the jobs it leases are counted as handed to the holder (mailroom_budget_handed) in the same
-- transaction, before they are returned, so a job is never in a sender's hands uncounted. When
-- it hands jobs the transaction commits synchronously (the count bounds a refund of the holder's
-- grants and must not be lost with the dequeue's asynchronous commit); when it hands none it
-- writes the count (0) only while the link is not yet registered (p_registered false: the first
-- dequeue after the link). Called by the collector's dequeue; returns mailroom_dequeue's rows.
CREATE OR REPLACE FUNCTION mailroom.mailroom_dequeue_for_holder(p_group text, p_limit integer, p_owner text, p_lease_ms integer, p_recoveries_only boolean, p_default_budget bigint, p_holder text, p_registered boolean) RETURNS TABLE(job_id bigint, action text, email text, login text, secret bytea, code text, expires_at bigint, account_id bigint, attempt integer, failures integer, created_at bigint, locale text, priority text)
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
DECLARE
    v_handed INT;
BEGIN
    RETURN QUERY SELECT * FROM mailroom_dequeue(p_group, p_limit, p_owner, p_lease_ms,
                                                p_recoveries_only, p_default_budget);
    GET DIAGNOSTICS v_handed = ROW_COUNT;
    IF v_handed > 0 OR NOT p_registered THEN
        PERFORM mailroom_budget_handed(p_group, p_owner, p_holder, v_handed);
        PERFORM set_config('synchronous_commit', CASE WHEN v_handed > 0 THEN 'on' ELSE 'off' END,
                           true);
    END IF;
END
$$;
