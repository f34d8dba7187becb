-- Part of the limits trigger (trg_before_token_insert_limits): a new request p_new_id of action
-- p_action (one with a secret, but activation) for account p_account supersedes the account's
-- pending tokens of that action, expired ones too (it keeps tokens_pending_idx at one row per
-- account and action), each with the reason naming the newer token. The wrong-code counters of
-- those superseded are free again (a superseded token checks no code).
-- Called by the trigger only: its statements are planned under the trigger's settings.
CREATE OR REPLACE FUNCTION mailroom.mailroom_supersede(p_account bigint, p_action text, p_new_id bigint) RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
BEGIN
    WITH s AS (
        UPDATE tokens t
           SET superseded_by = p_new_id,
               suppressed_reason = format('superseded by a newer %s request (token %s)',
                                          replace(p_action, '_', ' '), p_new_id)
         WHERE t.account = p_account AND t.action = p_action AND t.action <> 'activation'
           AND t.superseded_by IS NULL AND NOT t.rate_limited AND t.consumed_at IS NULL
           AND t.id <> p_new_id
        RETURNING t.id, t.code_slot
    )
    UPDATE code_counters c SET free_at = 0
      FROM s WHERE s.code_slot > 0 AND c.slot = s.code_slot AND c.token = s.id;
END;
$$;
