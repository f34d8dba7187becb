-- The NOTIFY channel the triggers signal on (mailroom_settings.channel), which the collector
-- LISTENs to. Called by the collector at start.
CREATE OR REPLACE FUNCTION mailroom.mailroom_channel() RETURNS text
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
    SELECT channel FROM mailroom_settings;
$$;
