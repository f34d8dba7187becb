DROP VIEW IF EXISTS account_emails;
DROP FUNCTION IF EXISTS request(bigint, text, text);
DROP FUNCTION IF EXISTS consume(text, text);
DROP FUNCTION IF EXISTS grant_application(regrole);
ALTER TABLE mailroom_settings DROP COLUMN consume_attempts_limit, DROP COLUMN delivery_group;
ALTER TABLE tokens DROP COLUMN wrong_codes;
