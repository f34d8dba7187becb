-- The consumption of mailroom_consume_token, once every check passed for token p_id (its row
-- locked by the caller): marks it consumed and frees its own wrong-code counter (p_code_slot
-- > 0), and answers 'ok'. email_change: the pending address p_to_address is checked again
-- (another account may have taken it since the request), and two accounts confirming one new
-- address at once are told apart by accounts' unique address (the second waits for the
-- first's commit and fails): 'address_taken', nothing consumed.
CREATE OR REPLACE FUNCTION mailroom.mailroom_consume_mark(p_id bigint, p_account bigint, p_action text, p_to_address text, p_code_slot integer) RETURNS text
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
BEGIN
    IF p_action = 'email_change' THEN
        IF mailroom_new_address_refusal(p_account, p_to_address) IS NOT NULL THEN
            RETURN 'address_taken';
        END IF;
        BEGIN
            UPDATE tokens x SET consumed_at = extract(epoch FROM now())::BIGINT WHERE x.id = p_id;
        EXCEPTION WHEN unique_violation THEN
            RETURN 'address_taken';
        END;
    ELSE
        UPDATE tokens x SET consumed_at = extract(epoch FROM now())::BIGINT WHERE x.id = p_id;
    END IF;
    IF p_code_slot > 0 THEN
        UPDATE code_counters c SET free_at = 0 WHERE c.slot = p_code_slot AND c.token = p_id;
    END IF;
    RETURN 'ok';
END;
$$;
