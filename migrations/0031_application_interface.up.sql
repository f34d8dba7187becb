-- The application's interface: mailroom.request, mailroom.consume and the view
-- mailroom.account_emails (their files in functions/ and views/), and the state they keep.
--
-- tokens.wrong_codes counts the wrong codes given for a token through mailroom.consume; at
-- mailroom_settings.consume_attempts_limit the token is locked. mailroom_settings.delivery_group
-- names the consumer group whose deliveries mailroom.account_emails reports (the senders').
--
-- No function of mailroom's may be executed by PUBLIC (`collector migrate` revokes it after
-- applying the function files): the application's role is granted EXECUTE on the interface
-- alone (mailroom.grant_application), so the USAGE on the schema it needs for that reaches
-- nothing else.

ALTER TABLE tokens ADD COLUMN wrong_codes SMALLINT NOT NULL DEFAULT 0;
ALTER TABLE mailroom_settings
    ADD COLUMN consume_attempts_limit INT NOT NULL DEFAULT 5
        CONSTRAINT mailroom_settings_consume_attempts_limit_check
        CHECK (consume_attempts_limit BETWEEN 1 AND 1000),
    ADD COLUMN delivery_group TEXT NOT NULL DEFAULT 'mailroom';
