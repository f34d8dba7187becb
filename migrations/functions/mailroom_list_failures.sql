-- The newest p_limit permanent failures of group p_group, newest first (ties by job, highest
-- first): each job's action and address ('' once its token is pruned), reason, attempts and time
-- of failure (Unix seconds). Called by the collector's ListFailures and the console.
CREATE OR REPLACE FUNCTION mailroom.mailroom_list_failures(p_group text, p_limit integer) RETURNS TABLE(job_id bigint, action text, email text, reason text, attempts integer, failed_at bigint)
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
    SELECT d.token_id, coalesce(t.action, ''), coalesce(t.to_address, a.email, ''),
           coalesce(d.reason, ''), d.attempts, EXTRACT(EPOCH FROM d.updated_at)::BIGINT
      FROM deliveries d JOIN consumer_groups g ON g.id = d.group_id
      LEFT JOIN tokens t ON t.id = d.token_id
      LEFT JOIN accounts a ON a.id = t.account
     WHERE g.name = p_group AND d.state = 'failed'
     ORDER BY d.updated_at DESC, d.token_id DESC
     LIMIT p_limit;
$$;
