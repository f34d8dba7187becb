-- The second part of mailroom_collect_signups: of the signups taken (p_accounts, p_ats), the
-- tokens due, one per account (its latest request: an earlier one is the same request made
-- again) whose account is still provisioned and has no pending activation, each with the
-- account's limit decided: NULL, or the rate-limited reason when p_limit_per_account accepted
-- activation requests already fall in the p_window seconds before the signup (at most that
-- many read, newest first). Returned in the order of address (as the limits count it:
-- mailroom_limit_address), time and account, which the address limits and the INSERT keep.
-- NULLs when none is due.
-- Called by mailroom_collect_signups only: its statements are planned under that function's
-- settings.
CREATE OR REPLACE FUNCTION mailroom.mailroom_collect_due(p_accounts bigint[], p_ats bigint[], p_limit_per_account integer, p_window integer, OUT o_accounts bigint[], OUT o_ats bigint[], OUT o_addresses text[], OUT o_reasons text[])
    LANGUAGE plpgsql
    SET search_path = pg_catalog, mailroom, pg_temp
    AS $$
BEGIN
    SELECT array_agg(x.account ORDER BY x.address, x.at, x.account),
           array_agg(x.at ORDER BY x.address, x.at, x.account),
           array_agg(x.address ORDER BY x.address, x.at, x.account),
           array_agg(x.reason ORDER BY x.address, x.at, x.account)
      INTO o_accounts, o_ats, o_addresses, o_reasons
      FROM (SELECT DISTINCT ON (u.account) u.account, u.at,
                   mailroom_limit_address(a.email) AS address,
                   CASE WHEN n.n >= p_limit_per_account
                        THEN mailroom_limit_reason(n.n, 'activation', 'account', p_window,
                                                   p_limit_per_account)
                   END AS reason
              FROM unnest(p_accounts, p_ats) AS u(account, at)
             CROSS JOIN LATERAL (SELECT a.email, a.status FROM accounts a
                                  WHERE a.id = u.account LIMIT 1) a
              LEFT JOIN LATERAL (SELECT l.id FROM tokens l
                                  WHERE l.account = u.account AND l.action = 'activation'
                                    AND l.consumed_at IS NULL
                                    AND l.expires_at > EXTRACT(EPOCH FROM now())
                                  ORDER BY l.created_at DESC
                                  LIMIT 1) l ON true
             CROSS JOIN LATERAL (
                   SELECT count(*)::INT AS n
                     FROM (SELECT 1 FROM tokens t
                            WHERE t.account = u.account AND t.action = 'activation'
                              AND t.created_at > u.at - p_window
                              AND NOT t.rate_limited
                            ORDER BY t.created_at DESC
                            LIMIT p_limit_per_account) c) n
             WHERE a.status = 'provisioned' AND l.id IS NULL
             ORDER BY u.account, u.at DESC) x;
END;
$$;
