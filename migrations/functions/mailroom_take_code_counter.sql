-- A counter of wrong codes for token p_token until p_until (its expiry, epoch seconds). Returns
-- the slot (positive: the token's own; negative: shared, see below) and its base, the
-- sequence's value now (-1 before its first nextval): the token's wrong codes are the
-- sequence's value less the base. Called by the limits trigger for a token of an action with a
-- code, in the inserter's transaction: taking a slot is undone with the token, while the counts
-- in the sequence survive every rollback (docs/design.md, "Wrong codes").
--
-- Its own: a free slot of code_counters (its holder has expired by the clock, was consumed or
-- was superseded), locked FOR UPDATE SKIP LOCKED, so concurrent inserts take different ones and
-- a slot that a consume holds FOR SHARE (its holder checking a code) is never taken under it.
-- Shared, when every slot is held: slot (p_token mod N) + 1, whose other tokens' wrong codes
-- then count for this one too (never fewer than its own: it may be locked early, never late).
-- No DDL here: the pool grows in the retention pass (mailroom_grow_code_counters).
CREATE OR REPLACE FUNCTION mailroom.mailroom_take_code_counter(p_token BIGINT, p_until BIGINT,
                                                               OUT o_slot INT, OUT o_base BIGINT)
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    SET enable_seqscan = off SET enable_bitmapscan = off SET jit = off
    AS $$
DECLARE
    v_slot INT;
BEGIN
    SELECT c.slot INTO v_slot FROM code_counters c
     WHERE c.free_at <= extract(epoch FROM clock_timestamp())::BIGINT
     ORDER BY c.free_at
     LIMIT 1
       FOR UPDATE SKIP LOCKED;
    IF FOUND THEN
        UPDATE code_counters c SET token = p_token, free_at = p_until WHERE c.slot = v_slot;
        o_slot := v_slot;
    ELSE
        SELECT (p_token % max(c.slot)) + 1 INTO v_slot FROM code_counters c;
        o_slot := -v_slot;
    END IF;
    o_base := coalesce(pg_sequence_last_value(
                           format('mailroom.mailroom_code_attempts_%s', v_slot)::regclass), -1);
END;
$$;
