-- mailroom.account_emails: what happened to each email of each account, for the application's
-- "we sent it at 12:03 — send it again?" page. Part of the application's interface
-- (docs/integration.md): the application's role gets SELECT on it and no right on the tables
-- it reads (a view reads them with its owner's rights). Query it by account, newest first:
--   SELECT * FROM mailroom.account_emails WHERE account = $1
--    ORDER BY requested_at DESC, token_id DESC;
-- requested_at has whole seconds (the token's created_at): token_id (a sequence) orders the
-- emails of one second, so the order is stable.
--
-- One row per token (a signup's activation appears once a collector has made its token, within
-- milliseconds while one runs; the signup queue is not read, so a page costs a few index probes
-- whatever its length):
--   account, token_id, action (its name in mailroom.actions: every action, built in or the
--   application's own, notices included), requested_at, expires_at, address (the normalised
--   address it went or goes to: an email_change's new address, an email_changed notice's old
--   one), state, state_at (when it got there, where known), reason, and sent_at (when the
--   email was acknowledged sent, whatever happened after: kept when a sent link expires,
--   bounces or is consumed; NULL while not sent). sent_at is the last column, so that SELECTs
--   written before it keep their columns.
-- state, the first that holds:
--   consumed (state_at: when), superseded, rate_limited (reason), then the delivery in the
--   group mailroom_settings.delivery_group (the senders'): bounced, complained (state_at: the
--   provider's report), sent (state_at: when it was acknowledged) while its link is valid, and
--   expired (state_at: the expiry; sent_at: when it was sent) once an email with a link is past
--   its expiry unconsumed (a notice, which has no link, stays sent), failed and suppressed
--   (reason), expired, sending (leased to a sender, or to be retried); with no delivery yet:
--   expired once past its expiry (state_at: the expiry), else queued.
-- The delivery is found by the token's id: its deliveries row, or else the lease batch whose
-- id range holds it (GiST index), so a page of an account's emails reads a few index entries
-- (and the action's row, for whether it carries a link).
CREATE OR REPLACE VIEW account_emails AS
SELECT t.account,
       t.id AS token_id,
       t.action,
       to_timestamp(t.created_at) AS requested_at,
       to_timestamp(t.expires_at) AS expires_at,
       t.address,
       CASE WHEN t.consumed_at IS NOT NULL THEN 'consumed'
            WHEN t.superseded_by IS NOT NULL THEN 'superseded'
            WHEN t.rate_limited THEN 'rate_limited'
            WHEN d.bounced_at IS NOT NULL THEN 'bounced'
            WHEN d.complained_at IS NOT NULL THEN 'complained'
            WHEN d.state = 'sent' AND k.carries_secret
                 AND t.expires_at <= extract(epoch FROM now()) THEN 'expired'
            WHEN d.state = 'sent' THEN 'sent'
            WHEN d.state IN ('failed', 'suppressed', 'expired') THEN d.state::text
            WHEN d.state IN ('leased', 'retry') THEN 'sending'
            WHEN d.state IS NOT NULL THEN d.state::text
            WHEN t.expires_at <= extract(epoch FROM now()) THEN 'expired'
            ELSE 'queued' END AS state,
       CASE WHEN t.consumed_at IS NOT NULL THEN to_timestamp(t.consumed_at)
            WHEN t.superseded_by IS NOT NULL OR t.rate_limited THEN NULL
            WHEN d.bounced_at IS NOT NULL THEN d.bounced_at
            WHEN d.complained_at IS NOT NULL THEN d.complained_at
            WHEN d.state = 'sent' AND k.carries_secret
                 AND t.expires_at <= extract(epoch FROM now()) THEN to_timestamp(t.expires_at)
            WHEN d.state IS NOT NULL THEN d.updated_at
            WHEN t.expires_at <= extract(epoch FROM now()) THEN to_timestamp(t.expires_at)
            END AS state_at,
       CASE WHEN t.superseded_by IS NOT NULL OR t.rate_limited THEN t.suppressed_reason
            WHEN d.state IN ('failed', 'suppressed', 'expired', 'cancelled')
                 OR d.bounced_at IS NOT NULL THEN coalesce(d.reason, d.bounce_type)
            END AS reason,
       CASE WHEN d.state = 'sent' THEN d.updated_at END AS sent_at
  FROM tokens t
  JOIN actions k ON k.name = t.action
  LEFT JOIN LATERAL (
        SELECT x.state, x.reason, x.updated_at, x.bounced_at, x.bounce_type, x.complained_at
          FROM (SELECT dd.state, dd.reason, dd.updated_at, dd.bounced_at, dd.bounce_type,
                       dd.complained_at, 1 AS pick
                  FROM deliveries dd
                 WHERE dd.token_id = t.id
                   AND dd.group_id = (SELECT g.id FROM consumer_groups g
                                       WHERE g.name = (SELECT s.delivery_group
                                                         FROM mailroom_settings s))
                UNION ALL
                SELECT CASE WHEN get_bit(b.done, array_position(b.ids, t.id) - 1) = 1
                            THEN 'sent' ELSE 'leased' END::delivery_state,
                       NULL::text, b.updated_at, NULL::timestamptz, NULL::text,
                       NULL::timestamptz, 2
                  FROM lease_batches b
                 WHERE int8range(b.lo_id, b.hi_id, '[]') @> t.id
                   AND b.group_id = (SELECT g.id FROM consumer_groups g
                                      WHERE g.name = (SELECT s.delivery_group
                                                        FROM mailroom_settings s))
                   AND t.id = ANY (b.ids)
                   AND (get_bit(b.done, array_position(b.ids, t.id) - 1) = 1
                        OR b.state = 'leased')
                   AND get_bit(b.kept, array_position(b.ids, t.id) - 1) = 0) x
         ORDER BY x.pick
         LIMIT 1) d ON true;
