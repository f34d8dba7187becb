-- The account border: codes that cannot be guessed, one account per address, mailboxes only.
--
--  * actions.code_alone: whether the action's code may be typed alone (mailroom.consume_code,
--    where the application knows the account but has no link). login_code: yes (its code is
--    its only secret a user types). password_recovery: never (the code only ever accompanies
--    the link's secret: two factors). An action of the application's own: no unless the
--    operator says so.
--  * Wrong codes counted where no rollback reaches them: each token of an action with a code
--    takes a counter (a sequence: nextval is not undone by the caller's ROLLBACK or by an
--    EXCEPTION block) from a pool kept in code_counters (slots 1..N, one sequence
--    mailroom_code_attempts_<slot> each); tokens.code_slot names it (negative: shared, the
--    pool had no free one) and tokens.code_base is the counter's value when the token took it.
--    64 counters here; the retention pass grows the pool (mailroom_grow_code_counters), never
--    a request (docs/design.md, "Wrong codes").
--  * One account per address: accounts_address_key, unique on lower(btrim(email)), replaces
--    the plain index of that expression and the unique index on the exact spelling. An
--    existing pair of accounts whose addresses differ only in case or surrounding spaces stops
--    the migration, naming the accounts (docs/sql.md, "Upgrading to one account per address").
--  * An account's address is a mailbox RFC 5321 allows and the sender can send to (ASCII
--    dot-atom local part of at most 64 characters, a domain of at least two labels, 254
--    characters at most), surrounding spaces aside: the trigger before_account_email_check, on
--    every INSERT and every UPDATE that sets the address, so that rows already there are
--    checked when their address changes and never otherwise (a status change of an old row
--    with a bad address still works; its emails keep failing at the sender, with the reason).
ALTER TABLE actions ADD COLUMN code_alone BOOLEAN NOT NULL DEFAULT false;
UPDATE actions SET code_alone = true WHERE name = 'login_code';
ALTER TABLE actions
    ADD CONSTRAINT actions_code_alone_check CHECK (carries_code OR NOT code_alone),
    ADD CONSTRAINT actions_recovery_code_check
        CHECK (name <> 'password_recovery' OR NOT code_alone);

CREATE TABLE code_counters (
    slot    INT PRIMARY KEY,    -- 1..N, no gaps: the sequence mailroom_code_attempts_<slot>
    token   BIGINT,             -- the token holding the counter (NULL: none yet)
    free_at BIGINT NOT NULL     -- epoch seconds from which another token may take it
);
CREATE INDEX code_counters_free_at_idx ON code_counters (free_at);
DO $$
BEGIN
    FOR v_slot IN 1 .. 64 LOOP
        EXECUTE format('CREATE SEQUENCE mailroom.mailroom_code_attempts_%s'
                       ' AS BIGINT MINVALUE 0 START 0 CACHE 1', v_slot);
        INSERT INTO code_counters (slot, token, free_at) VALUES (v_slot, NULL, 0);
    END LOOP;
END;
$$;
ALTER TABLE tokens ADD COLUMN code_slot INT, ADD COLUMN code_base BIGINT;

-- The email_changed notice goes to an address the account no longer has: a limit per address
-- too, so that accounts made to take an address and leave it cannot mail it without end.
UPDATE actions SET limit_per_address = 3 WHERE name = 'email_changed' AND limit_per_address IS NULL;

DO $$
DECLARE
    v_pairs TEXT;
BEGIN
    SELECT string_agg(x.ids, '; ' ORDER BY x.first)
      INTO v_pairs
      FROM (SELECT 'accounts ' || string_agg(a.id::TEXT, ', ' ORDER BY a.id) AS ids,
                   min(a.id) AS first
              FROM accounts a
             GROUP BY lower(btrim(a.email))
            HAVING count(*) > 1
             ORDER BY min(a.id)
             LIMIT 20) x;
    IF v_pairs IS NOT NULL THEN
        RAISE EXCEPTION 'one account per address: % share an address (compared as lower(btrim(email)))', v_pairs
            USING ERRCODE = 'unique_violation',
                  HINT = 'change the address of all but one account of each set, or merge them '
                         '(docs/sql.md, "Upgrading to one account per address"), then migrate '
                         'again';
    END IF;
END;
$$;
CREATE UNIQUE INDEX accounts_address_key ON accounts (lower(btrim(email)));
DROP INDEX accounts_address_idx;
ALTER TABLE accounts DROP CONSTRAINT accounts_email_key;
