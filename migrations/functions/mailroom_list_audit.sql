-- The operator audit, newest first: at most p_limit (1 to 1000; NULL: 100) entries with an id
-- below p_before (NULL or 0: from the newest). Read by the collector's ListAudit.
CREATE OR REPLACE FUNCTION mailroom.mailroom_list_audit(p_before bigint, p_limit integer)
    RETURNS TABLE (id bigint, at_ms bigint, credential text, method text, consumer_group text,
                   target text, outcome text)
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
    SELECT a.id, (extract(epoch FROM a.at) * 1000)::bigint, a.credential, a.method,
           a.consumer_group, a.target, a.outcome
      FROM mailroom.operator_audit a
     WHERE coalesce(p_before, 0) = 0 OR a.id < p_before
     ORDER BY a.id DESC
     LIMIT least(greatest(coalesce(p_limit, 100), 1), 1000);
$$;
