-- The id of the consumer group whose deliveries the application is told about
-- (mailroom_settings.delivery_group: its senders' group), NULL while it does not exist. Read by
-- mailroom.email_history, once per call.
CREATE OR REPLACE FUNCTION mailroom.mailroom_delivery_group_id() RETURNS integer
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
    SELECT g.id FROM mailroom.consumer_groups g
     WHERE g.name = (SELECT s.delivery_group FROM mailroom.mailroom_settings s);
$$;
