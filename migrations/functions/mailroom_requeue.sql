-- Puts failed jobs of group p_group back in the queue, due now with their failure counts reset:
-- those of p_job_ids, or every failed job of the group when p_job_ids is NULL. A job not failed
-- (or of another group) is not touched. Returns how many were requeued. Called by the
-- collector's Requeue.
CREATE OR REPLACE FUNCTION mailroom.mailroom_requeue(p_group text, p_job_ids bigint[]) RETURNS integer
    LANGUAGE sql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
    WITH requeued AS (
        UPDATE deliveries d SET state = 'retry', due_at = now(), failures = 0, lost_leases = 0,
                                reason = NULL, updated_at = now()
          FROM consumer_groups g
         WHERE g.name = p_group AND d.group_id = g.id AND d.state = 'failed'
           AND (p_job_ids IS NULL OR d.token_id = ANY (p_job_ids))
        RETURNING 1)
    SELECT count(*)::INT FROM requeued;
$$;
