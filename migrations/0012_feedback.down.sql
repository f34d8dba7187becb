DROP FUNCTION mailroom_reputation(INT);
DROP FUNCTION mailroom_record_feedback(TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT[], TEXT, TEXT, INT);
DROP FUNCTION mailroom_suppress_addresses(TEXT[], TEXT, TEXT);
DROP FUNCTION mailroom_record_sent(TEXT, BIGINT, BIGINT[], TEXT[]);
DROP FUNCTION mailroom_reputation_add(INT, BIGINT, BIGINT, BIGINT, BIGINT);
DROP TABLE reputation_hourly;
DROP TABLE soft_bounces;
DROP TABLE sns_messages;
DROP INDEX deliveries_provider_message_idx;
ALTER TABLE deliveries
    DROP COLUMN provider_message_id,
    DROP COLUMN delivered_at,
    DROP COLUMN bounced_at,
    DROP COLUMN bounce_type,
    DROP COLUMN complained_at,
    DROP COLUMN rejected_at;
