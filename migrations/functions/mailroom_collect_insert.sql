-- The last part of mailroom_collect_signups: inserts the activation tokens of accounts
-- p_accounts, requested at p_ats, expiring p_expiry seconds from now, rate limited where
-- p_reasons says why. The limits trigger skips its own decision for this INSERT alone: the mark
-- (mailroom_collection_xact) is this transaction's id for the INSERT only, cleared at once,
-- whether it succeeds or fails (a sequence is not transactional), so nothing else this
-- transaction inserts skips the limits. The tokens' foreign key is checked at the INSERT's end,
-- inside this function, so that a session whose first checks are made here (a collector's: it
-- inserts tokens nowhere else) plans them with the collection's settings, an index probe of
-- accounts. PostgreSQL keeps one plan of the check per session; made at the commit with the
-- session's settings while accounts was analysed empty, it read the whole table for every token
-- until the next ANALYZE of accounts. Checks the caller's transaction left pending run here
-- too; a failure of any rolls the INSERT back, the mark with it. The check is deferred again
-- afterwards for the rest of the caller's transaction, whatever it had set.
-- Called by mailroom_collect_signups only: its statements are planned under that function's
-- settings.
CREATE OR REPLACE FUNCTION mailroom.mailroom_collect_insert(p_accounts bigint[], p_ats bigint[], p_reasons text[], p_expiry integer) RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
BEGIN
    PERFORM setval('mailroom_collection_xact', pg_current_xact_id()::TEXT::BIGINT);
    BEGIN
        SET CONSTRAINTS tokens_account_fkey IMMEDIATE;
        INSERT INTO tokens (account, action, priority, created_at, expires_at, address,
                            rate_limited, suppressed_reason)
        SELECT u.account, 'activation', 'normal', u.at,
               EXTRACT(EPOCH FROM now())::BIGINT + p_expiry, lower(btrim(a.email)),
               u.reason IS NOT NULL, u.reason
          FROM unnest(p_accounts, p_ats, p_reasons) AS u(account, at, reason)
          JOIN accounts a ON a.id = u.account;
    EXCEPTION WHEN OTHERS THEN
        PERFORM setval('mailroom_collection_xact', 0, false);
        RAISE;
    END;
    SET CONSTRAINTS tokens_account_fkey DEFERRED;
    PERFORM setval('mailroom_collection_xact', 0, false);
END;
$$;
