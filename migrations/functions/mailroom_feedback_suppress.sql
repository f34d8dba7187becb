-- Part of mailroom_record_feedback: what event p_event of path p_provider does to the addresses
-- p_targets (the matched delivery's recipient, or the unmatched event's recipients where the
-- operator opted in; none otherwise): a Permanent bounce suppresses them (hard_bounce), a
-- Transient one counts a soft bounce each and suppresses those with p_soft_limit within 7 days,
-- a Complaint suppresses them (complaint). Returns whether it wrote a suppression or a soft
-- bounce.
CREATE OR REPLACE FUNCTION mailroom.mailroom_feedback_suppress(p_targets text[], p_provider text, p_event text, p_bounce_type text, p_detail text, p_soft_limit integer) RETURNS boolean
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
DECLARE
    v_addr TEXT;
    v_soft TEXT[] := '{}';
BEGIN
    IF p_event = 'Bounce' AND p_bounce_type = 'Permanent' THEN
        RETURN mailroom.mailroom_suppress_addresses(
                   p_targets, 'hard_bounce',
                   format('%s bounce: Permanent %s', p_provider, p_detail)) > 0;
    ELSIF p_event = 'Bounce' AND p_bounce_type = 'Transient'
          AND coalesce(array_length(p_targets, 1), 0) > 0 THEN
        DELETE FROM mailroom.soft_bounces b
         WHERE b.address = ANY (p_targets)
           AND b.bounced_at <= now() - interval '7 days';
        INSERT INTO mailroom.soft_bounces (address) SELECT unnest(p_targets);
        FOREACH v_addr IN ARRAY p_targets LOOP
            IF (SELECT count(*) FROM mailroom.soft_bounces b
                 WHERE b.address = v_addr
                   AND b.bounced_at > now() - interval '7 days') >= p_soft_limit THEN
                v_soft := v_soft || v_addr;
            END IF;
        END LOOP;
        IF array_length(v_soft, 1) > 0 THEN
            PERFORM mailroom.mailroom_suppress_addresses(
                v_soft, 'hard_bounce',
                format('%s bounce: %s transient bounces within 7 days %s', p_provider, p_soft_limit,
                       p_detail));
        END IF;
        RETURN TRUE;
    ELSIF p_event = 'Complaint' THEN
        RETURN mailroom.mailroom_suppress_addresses(
                   p_targets, 'complaint', format('%s complaint %s', p_provider, p_detail)) > 0;
    END IF;
    RETURN FALSE;
END;
$$;
