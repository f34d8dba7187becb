-- Whether an event that came on feedback path p_path (ses, postmark, sendgrid, mailgun, resend,
-- sandbox, http) may reach a delivery sent by p_sent_by (deliveries.provider). Called by
-- mailroom_record_feedback for each delivery an event names. A provider's path reaches only
-- the deliveries that provider's API sent; `http` (reports of the operator's own services,
-- signed with the operator's secrets) reaches every provider's; a delivery sent by `smtp` (a
-- relay, which may be any provider's SMTP endpoint) or of no known provider (NULL: acknowledged
-- before deliveries named it, or by a subscriber that does not say) is reached by every path.
CREATE OR REPLACE FUNCTION mailroom.mailroom_feedback_reaches(p_path text, p_sent_by text) RETURNS boolean
    LANGUAGE sql IMMUTABLE
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
    SELECT p_path = 'http' OR p_sent_by IS NULL OR p_sent_by IN (p_path, 'smtp');
$$;
