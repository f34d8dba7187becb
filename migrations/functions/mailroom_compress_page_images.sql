-- Compresses the full page images of the rest of the caller's transaction: sets wal_compression
-- (lz4, else pglz where the server was built without lz4) for that transaction alone (SET LOCAL)
-- when the server's setting is off and the role may set it (a superuser, or a role given
-- GRANT SET ON PARAMETER wal_compression); otherwise changes nothing. Returns the setting now in
-- force. Called first by the prune functions of the per-email tables (mailroom_prune_tokens,
-- _deliveries, _lease_batches, _email_events): retention changes rows written days before, on
-- pages no write has touched since the last checkpoint, so nearly every page it changes is
-- logged whole once (docs/design.md, "Retention compresses its page images").
CREATE OR REPLACE FUNCTION mailroom.mailroom_compress_page_images() RETURNS text
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
BEGIN
    IF current_setting('wal_compression') = 'off' THEN
        BEGIN
            PERFORM set_config('wal_compression', 'lz4', true);
        EXCEPTION
            WHEN insufficient_privilege THEN NULL;
            WHEN invalid_parameter_value THEN
                PERFORM set_config('wal_compression', 'pglz', true);
        END;
    END IF;
    RETURN current_setting('wal_compression');
END;
$$;
