-- Creates a group if missing; no-op if it exists. With p_from_earliest the group starts at the
-- earliest token that has not expired yet, so it receives every token still sendable (the
-- collector creates its MAILROOM_GROUPS this way, and a Subscribe with start_from_earliest);
-- otherwise it receives tokens committed from now on (as mailroom_ensure_group(TEXT)).
--
-- The group's cursors (group_cursors: one row per priority class) start at one lower snapshot:
-- a token is ahead of the group when its transaction is not visible in it. The snapshot 'x:x:' sees exactly the transactions before x, so x is the
-- oldest of the earliest unexpired token's transaction and the oldest transaction still in
-- progress (which may be inserting tokens we cannot see yet). Expired tokens after x are
-- scanned too and recorded as expired.

CREATE OR REPLACE FUNCTION mailroom.mailroom_ensure_group(p_group text) RETURNS void
    LANGUAGE sql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
    WITH g AS (
        INSERT INTO consumer_groups (name) VALUES (p_group)
        ON CONFLICT (name) DO NOTHING
        RETURNING id
    )
    INSERT INTO group_cursors (group_id, priority, prev_snapshot)
    SELECT g.id, k.priority, pg_current_snapshot()
      FROM g CROSS JOIN unnest(enum_range(NULL::action_priority)) AS k(priority);
$$;

CREATE OR REPLACE FUNCTION mailroom.mailroom_ensure_group(p_group text, p_from_earliest boolean) RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
DECLARE
    v_from XID8;
    v_snapshot PG_SNAPSHOT := pg_current_snapshot();
BEGIN
    IF EXISTS (SELECT 1 FROM consumer_groups WHERE name = p_group) THEN
        RETURN;
    END IF;
    IF p_from_earliest THEN
        -- One probe per priority class on tokens_priority_txid_id_idx.
        SELECT least(pg_snapshot_xmin(v_snapshot),
                     (SELECT min(e.txid)
                        FROM unnest(enum_range(NULL::action_priority)) k(priority)
                       CROSS JOIN LATERAL (
                             SELECT t.txid FROM tokens t
                              WHERE t.priority = k.priority
                                AND t.expires_at > EXTRACT(EPOCH FROM now())::BIGINT
                              ORDER BY t.priority, t.txid LIMIT 1) e))
          INTO v_from;
        v_snapshot := format('%s:%s:', v_from, v_from)::PG_SNAPSHOT;
    END IF;
    WITH g AS (
        INSERT INTO consumer_groups (name) VALUES (p_group)
        ON CONFLICT (name) DO NOTHING
        RETURNING id
    )
    INSERT INTO group_cursors (group_id, priority, prev_snapshot)
    SELECT g.id, k.priority, v_snapshot
      FROM g CROSS JOIN unnest(enum_range(NULL::action_priority)) AS k(priority);
END;
$$;
