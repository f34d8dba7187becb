-- Back to 0010: senders pace on their own again (MAILROOM_BUDGET per sender).
DROP FUNCTION mailroom_budget_return(TEXT, TEXT, BIGINT, INT);
DROP FUNCTION mailroom_budget_grant(TEXT, TEXT, INT, BOOLEAN, BIGINT, INT, BIGINT, INT);
DROP FUNCTION mailroom_budget_state(INT, BIGINT, INT);
DROP TABLE budget_grants;
DROP TABLE budget_months;
DROP TABLE group_budgets;
