-- Leased password-recovery batches by group and lease end, for
-- functions/mailroom_budget_recovery_first.sql (recoveries first across the senders of a group):
-- a small index, recoveries being a small share of the jobs.
CREATE INDEX lease_batches_recovery_idx ON lease_batches (group_id, due_at)
    WHERE state = 'leased' AND recovery;
