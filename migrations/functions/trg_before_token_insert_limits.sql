-- The action's rules and abuse limits, decided when a token is inserted: the token takes its
-- action's class (tokens.priority), expiry (unless the inserter gave one) and code length from
-- its row of mailroom.actions; a token over the account's or the address's limit of its action
-- in the action's window is marked rate limited (never sent); a new request of an action with a
-- secret (but activation) supersedes the account's pending one of that action; a token of an
-- action with a code takes a wrong-code counter (mailroom_take_code_counter). Per address: the
-- limits count mailroom_limit_address's form of the address (sub-addresses folded). Per account: the
-- account's tokens counted under its row lock. Per address (the token's to_address when it has
-- one, else the account's): mailroom_address_limit (a counter row per address and action, no
-- lock in the shared lock table, so an import of any size in one statement works). Planner
-- settings keep index probes whatever the statistics (JIT off: disabled scans cost too much).
--
-- Every token is decided here but the activation tokens of queued signups, whose limits the
-- collection decides by the same rules for its whole batch (mailroom_collect_insert): the WHEN
-- skips rows inserted by the transaction whose id is in mailroom_collection_xact. Setting it
-- takes UPDATE on the sequence, which the application's role lacks (nextval cannot reach a
-- transaction's id); the collection clears it after its INSERT; an id is not used twice.
CREATE OR REPLACE FUNCTION mailroom.trg_before_token_insert_limits() RETURNS trigger
    LANGUAGE plpgsql
    SECURITY DEFINER
    SET search_path = pg_catalog, mailroom, pg_temp
    SET enable_seqscan = off SET enable_bitmapscan = off SET enable_sort = off SET jit = off
    AS $$
DECLARE
    k            actions%ROWTYPE;
    v_window     INT;
    v_address    TEXT;
    v_since      BIGINT;
    v_n          INT := 0;
    v_reason     TEXT;
BEGIN
    SELECT * INTO k FROM actions x WHERE x.name = NEW.action;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown action %', quote_literal(left(NEW.action, 64))
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    SELECT coalesce(k.limit_window_seconds, s.limit_window_seconds) INTO v_window
      FROM mailroom_settings s;
    NEW.priority := k.priority;
    NEW.expires_at := coalesce(NEW.expires_at, NEW.created_at + k.expiry_seconds);
    IF k.carries_code AND char_length(NEW.code) <> k.code_length THEN
        NEW.code := mailroom_random_digits(k.code_length);
    END IF;
    -- The window ends at the request's time: a collected signup's token carries its signup's
    -- time, however late it was collected.
    v_since := NEW.created_at - v_window;

    -- The account's row lock serialises requests for one account. The row is missing when the
    -- account is inserted later in the application's transaction (the foreign key is
    -- deferred): then only the inserter's address is known, and the account has no earlier
    -- request to count.
    SELECT lower(trim(coalesce(NEW.to_address, a.email))) INTO v_address FROM accounts a
     WHERE a.id = NEW.account FOR NO KEY UPDATE;
    IF FOUND THEN
        NEW.address := v_address;
        IF k.limit_per_account > 0 THEN
            SELECT count(*) INTO v_n
              FROM (SELECT 1 FROM tokens t
                     WHERE t.account = NEW.account AND t.action = NEW.action
                       AND t.created_at > v_since AND NOT t.rate_limited
                     ORDER BY t.created_at DESC
                     LIMIT k.limit_per_account) x;
        END IF;
    ELSE
        NEW.address := lower(trim(coalesce(NEW.to_address, NEW.address)));
    END IF;
    IF v_n >= k.limit_per_account THEN
        NEW.rate_limited := true;
        NEW.suppressed_reason := mailroom_limit_reason(v_n, NEW.action, 'account', v_window,
                                                       k.limit_per_account);
    END IF;

    IF NOT NEW.rate_limited AND k.limit_per_address IS NOT NULL AND NEW.address IS NOT NULL THEN
        v_reason := (mailroom_address_limit(ARRAY[mailroom_limit_address(NEW.address)],
                                            ARRAY[NEW.created_at],
                                            NEW.action, k.limit_per_address, v_window))[1];
        IF v_reason IS NOT NULL THEN
            NEW.rate_limited := true;
            NEW.suppressed_reason := v_reason;
        END IF;
    END IF;

    IF NEW.rate_limited THEN
        NEW.superseded_by := NULL;
    ELSIF k.carries_secret AND NEW.action <> 'activation' THEN
        PERFORM mailroom_supersede(NEW.account, NEW.action, NEW.id);
    END IF;
    -- A token whose code may be guessed counts its wrong codes where no rollback undoes them.
    IF k.carries_code AND NOT NEW.rate_limited THEN
        SELECT x.o_slot, x.o_base INTO NEW.code_slot, NEW.code_base
          FROM mailroom_take_code_counter(NEW.id, NEW.expires_at) x;
    END IF;
    RETURN NEW;
END;
$$;

CREATE OR REPLACE TRIGGER before_token_insert_limits BEFORE INSERT ON mailroom.tokens FOR EACH ROW
    WHEN (pg_current_xact_id()::text::bigint
          IS DISTINCT FROM pg_sequence_last_value('mailroom_collection_xact'))
    EXECUTE FUNCTION mailroom.trg_before_token_insert_limits();
