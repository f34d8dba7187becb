-- Per group and provider, the feedback counters of the last `p_window_seconds` (whole hours, as
-- mailroom_reputation): deliveries, permanent bounces and complaints reported by each
-- provider's feedback path. Emails sent are counted per group only (mailroom_reputation): an
-- acknowledgement does not say which provider sent. Read by the collector's reputation gauges.

CREATE OR REPLACE FUNCTION mailroom.mailroom_reputation_by_provider(p_window_seconds integer) RETURNS TABLE(group_name text, provider text, delivered bigint, bounced bigint, complained bigint)
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
    SELECT g.name, r.provider, sum(r.delivered)::BIGINT, sum(r.bounced)::BIGINT,
           sum(r.complained)::BIGINT
      FROM consumer_groups g
      JOIN reputation_hourly r
        ON r.group_id = g.id
       AND r.hour > now() - make_interval(secs => p_window_seconds) - interval '1 hour'
     WHERE r.provider <> ''
     GROUP BY g.name, r.provider
     ORDER BY g.name, r.provider;
$$;
