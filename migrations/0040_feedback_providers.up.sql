-- Feedback from every provider: the reputation counters are kept per group and provider. An
-- acknowledgement's emails sent say no provider (''); a feedback event names the path it came
-- on (ses, postmark, sendgrid, mailgun, resend, http). The functions that write and read the
-- column are in their source files (mailroom_reputation_add, mailroom_record_feedback,
-- mailroom_compact_reputation, mailroom_reputation_by_provider).
ALTER TABLE reputation_hourly ADD COLUMN provider text NOT NULL DEFAULT '';
