-- PostgreSQL cannot drop a value from an enum: 'invited' stays in account_status, and the
-- invited accounts become provisioned (their invitations are gone with 0033's down; an
-- activation can be requested for them).
UPDATE accounts SET status = 'provisioned' WHERE status = 'invited';
