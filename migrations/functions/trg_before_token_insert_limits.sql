-- The abuse limits, decided when a token is inserted: an activation or a recovery over the
-- account's or the address's limit in limit_window_seconds is marked rate limited (never
-- sent); a new recovery supersedes the account's pending one. Per account: the account's
-- tokens counted under its row lock. Per address: mailroom_address_limit (a counter row per
-- address and action, no lock in the shared lock table, so an import of any size in one
-- statement works). Planner settings keep index probes whatever the statistics (and JIT off:
-- a disabled scan's cost would otherwise JIT-compile every statement).
--
-- Every token is decided here (those the application inserts, such as password recoveries, and
-- the activation token an un-suspension creates, trg_before_account_status_change) except the
-- activation tokens the collector creates for queued signups: mailroom_collect_signups decides
-- their limits by the same rules for its whole batch at once, and the trigger's WHEN skips the
-- rows inserted by the transaction whose id that function set in mailroom_collection_xact for
-- its INSERT (built-in functions only, no call). The sequence is the one thing the WHEN trusts:
-- setting it takes UPDATE on it, which the application's role does not need (it may read it,
-- and nextval cannot reach a transaction's id), the collection clears it right after its
-- INSERT, and a transaction id is not used twice, so no other insert matches it.
CREATE OR REPLACE FUNCTION mailroom.trg_before_token_insert_limits() RETURNS trigger
    LANGUAGE plpgsql
    SECURITY DEFINER
    SET search_path = pg_catalog, mailroom, pg_temp
    SET enable_seqscan = off SET enable_bitmapscan = off SET enable_sort = off SET jit = off
    AS $$
DECLARE
    s            mailroom_settings%ROWTYPE;
    v_address    TEXT;
    v_since      BIGINT;
    v_acct_limit INT;
    v_addr_limit INT;
    v_n          INT := 0;
    v_reason     TEXT;
BEGIN
    SELECT * INTO s FROM mailroom_settings;
    -- The window ends at the request's time: a collected signup's token carries its signup's
    -- time, however late it was collected.
    v_since := NEW.created_at - s.limit_window_seconds;
    IF NEW.action = 'password_recovery' THEN
        v_acct_limit := s.recovery_limit_per_account;
        v_addr_limit := s.recovery_limit_per_address;
    ELSE
        v_acct_limit := s.activation_limit_per_account;
        v_addr_limit := s.activation_limit_per_address;
    END IF;

    -- The account's row lock serialises requests for one account. The row is missing when the
    -- account is inserted later in the application's transaction (the foreign key is
    -- deferred): then only the inserter's address is known, and the account has no earlier
    -- request to count.
    SELECT lower(trim(a.email)) INTO v_address FROM accounts a
     WHERE a.id = NEW.account FOR NO KEY UPDATE;
    IF FOUND THEN
        NEW.address := v_address;
        IF v_acct_limit > 0 THEN
            SELECT count(*) INTO v_n
              FROM (SELECT 1 FROM tokens t
                     WHERE t.account = NEW.account AND t.action = NEW.action
                       AND t.created_at > v_since AND NOT t.rate_limited
                     ORDER BY t.created_at DESC
                     LIMIT v_acct_limit) x;
        END IF;
    ELSE
        NEW.address := lower(trim(NEW.address));
    END IF;
    IF v_n >= v_acct_limit THEN
        NEW.rate_limited := true;
        NEW.suppressed_reason := mailroom_limit_reason(v_n, NEW.action, 'account',
                                                       s.limit_window_seconds, v_acct_limit);
    END IF;

    IF NOT NEW.rate_limited AND v_addr_limit IS NOT NULL AND NEW.address IS NOT NULL THEN
        v_reason := (mailroom_address_limit(ARRAY[NEW.address], ARRAY[NEW.created_at],
                                            NEW.action, v_addr_limit,
                                            s.limit_window_seconds))[1];
        IF v_reason IS NOT NULL THEN
            NEW.rate_limited := true;
            NEW.suppressed_reason := v_reason;
        END IF;
    END IF;

    IF NEW.rate_limited THEN
        NEW.superseded_by := NULL;
    ELSIF NEW.action = 'password_recovery' THEN
        -- Expired ones too: it keeps tokens_pending_recovery_idx at one row per account.
        UPDATE tokens t
           SET superseded_by = NEW.id,
               suppressed_reason = format(
                   'superseded by a newer password recovery request (token %s)', NEW.id)
         WHERE t.account = NEW.account AND t.action = 'password_recovery'
           AND t.superseded_by IS NULL AND NOT t.rate_limited AND t.consumed_at IS NULL
           AND t.id <> NEW.id;
    END IF;
    RETURN NEW;
END;
$$;

CREATE OR REPLACE TRIGGER before_token_insert_limits BEFORE INSERT ON mailroom.tokens FOR EACH ROW
    WHEN (pg_current_xact_id()::text::bigint
          IS DISTINCT FROM pg_sequence_last_value('mailroom_collection_xact'))
    EXECUTE FUNCTION mailroom.trg_before_token_insert_limits();
