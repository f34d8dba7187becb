-- Pauses (p_paused) or resumes group p_group for an operator: while consumer_groups.paused_at
-- is set, mailroom_dequeue hands out none of the group's jobs, on every collector. p_reason
-- (cut to 1000 characters) is kept with a pause; pausing a paused group keeps its first time
-- and takes the new reason; resuming clears both. Raises no_data_found for an unknown group.
-- Returns the group's pause as it now is (paused_at in Unix seconds, NULL when not paused).
-- Called by the collector's PauseGroup and ResumeGroup.
CREATE OR REPLACE FUNCTION mailroom.mailroom_pause_group(p_group text, p_paused boolean, p_reason text)
    RETURNS TABLE (paused_at bigint, reason text)
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    UPDATE consumer_groups g
       SET paused_at = CASE WHEN p_paused THEN coalesce(g.paused_at, now()) END,
           paused_reason = CASE WHEN p_paused THEN left(coalesce(p_reason, ''), 1000) END
     WHERE g.name = p_group
    RETURNING extract(epoch FROM g.paused_at)::bigint, g.paused_reason;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown consumer group "%"', p_group USING ERRCODE = 'no_data_found';
    END IF;
END;
$$;
