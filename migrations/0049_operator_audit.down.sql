-- Back before 0049: the audit and its setting go, with the functions that use them.
DROP FUNCTION IF EXISTS mailroom.mailroom_audit(text, text, text, text);
DROP FUNCTION IF EXISTS mailroom.mailroom_audit_end(bigint, text);
DROP FUNCTION IF EXISTS mailroom.mailroom_list_audit(bigint, integer);
DROP FUNCTION IF EXISTS mailroom.mailroom_prune_operator_audit(integer);
DROP TABLE IF EXISTS mailroom.operator_audit;
ALTER TABLE mailroom.mailroom_settings DROP COLUMN audit_retention_days;
