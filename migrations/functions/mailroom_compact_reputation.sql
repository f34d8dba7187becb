-- The same for the reputation counters: one row per group, provider and hour, and hours older than
-- the longest reputation window (90 days, MAILROOM_REPUTATION_WINDOW's maximum) dropped.
-- Returns the number of rows left.
CREATE OR REPLACE FUNCTION mailroom.mailroom_compact_reputation() RETURNS bigint
    LANGUAGE sql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
    WITH del AS (
        DELETE FROM reputation_hourly
        RETURNING group_id, provider, hour, sent, delivered, bounced, complained
    ), ins AS (
        INSERT INTO reputation_hourly (group_id, provider, hour, sent, delivered, bounced, complained)
        SELECT group_id, provider, hour, sum(sent), sum(delivered), sum(bounced), sum(complained)
          FROM del
         WHERE hour > now() - interval '91 days'
         GROUP BY group_id, provider, hour
        RETURNING 1
    )
    SELECT count(*) FROM ins;
$$;
