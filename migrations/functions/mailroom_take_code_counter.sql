-- A counter of wrong codes for token p_token, held until p_until (its expiry, epoch seconds):
-- the slot of a free one in code_counters (one whose holder has expired, was consumed or was
-- superseded), or a new slot and its sequence when every counter is held. Returns the slot and
-- its base, the sequence's value now (-1 before its first nextval): the token's wrong codes are
-- the sequence's value less the base. Called by the limits trigger for a token of an action
-- with a code, in the inserter's transaction: taking a slot is undone with the token, while
-- the counts in the sequence survive every rollback (docs/design.md, "Wrong codes").
--
-- Concurrent inserts take different slots (SKIP LOCKED); the pool holds as many sequences as
-- tokens with codes were ever live at once, and a slot is only ever held by one live token.
CREATE OR REPLACE FUNCTION mailroom.mailroom_take_code_counter(p_token BIGINT, p_until BIGINT,
                                                               OUT o_slot INT, OUT o_base BIGINT)
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    SET enable_seqscan = off SET enable_bitmapscan = off SET jit = off
    AS $$
BEGIN
    SELECT c.slot INTO o_slot FROM code_counters c
     WHERE c.free_at <= extract(epoch FROM now())::BIGINT
     ORDER BY c.free_at
     LIMIT 1
       FOR UPDATE SKIP LOCKED;
    IF FOUND THEN
        UPDATE code_counters c SET token = p_token, free_at = p_until WHERE c.slot = o_slot;
    ELSE
        o_slot := nextval('mailroom.code_counter_slots');
        EXECUTE format('CREATE SEQUENCE mailroom.mailroom_code_attempts_%s'
                       ' AS BIGINT MINVALUE 0 START 0 CACHE 1', o_slot);
        INSERT INTO code_counters (slot, token, free_at) VALUES (o_slot, p_token, p_until);
    END IF;
    o_base := coalesce(pg_sequence_last_value(
                           format('mailroom.mailroom_code_attempts_%s', o_slot)::regclass), -1);
END;
$$;
