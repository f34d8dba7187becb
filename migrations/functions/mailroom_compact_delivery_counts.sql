-- Folds delivery_counts' deltas into one row per (group, state). Called by the retention pass.
-- Rows inserted by transactions that commit meanwhile are not visible to the DELETE and stay as
-- they are; a concurrent compaction waits for the rows this one deletes and then skips them.
-- Returns the number of rows left.

CREATE OR REPLACE FUNCTION mailroom.mailroom_compact_delivery_counts() RETURNS bigint
    LANGUAGE sql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
    WITH del AS (
        DELETE FROM delivery_counts RETURNING group_id, state, n
    ), ins AS (
        INSERT INTO delivery_counts (group_id, state, n)
        SELECT group_id, state, sum(n) FROM del GROUP BY group_id, state HAVING sum(n) <> 0
        RETURNING 1
    )
    SELECT count(*) FROM ins;
$$;
