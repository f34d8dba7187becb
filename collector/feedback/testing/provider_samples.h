#pragma once

// The providers' feedback webhooks as their documentation publishes them (Postmark's webhook
// pages, SendGrid's Event Webhook reference, Mailgun's webhook payloads, Resend's email
// events), for the parsers' and the endpoint's tests. Mailgun's carries its signature object
// in the body: the tests replace it with one signed by their own key and clock. The http
// transport's report is mailroom's own (docs/configuration.md, "Delivery reports").

namespace mailroom::testing {

inline constexpr char kPostmarkBounce[] = R"json({
  "RecordType": "Bounce",
  "MessageStream": "outbound",
  "ID": 4323372036854775807,
  "Type": "HardBounce",
  "TypeCode": 1,
  "Name": "Hard bounce",
  "Tag": "Test",
  "MessageID": "883953f4-6105-42a2-a16a-77a8eac79483",
  "Metadata" : {"a_key" : "a_value", "b_key": "b_value"},
  "ServerID": 23,
  "Description": "The server was unable to deliver your message (ex: unknown user, mailbox not found).",
  "Details": "Test bounce details",
  "Email": "john@example.com",
  "From": "sender@example.com",
  "BouncedAt": "2019-11-05T16:33:54.9070259Z",
  "DumpAvailable": true,
  "Inactive": true,
  "CanActivate": true,
  "Subject": "Test subject",
  "Content": "<Full dump of bounce>"
})json";

inline constexpr char kPostmarkSpamComplaint[] = R"json({
  "RecordType": "SpamComplaint",
  "MessageStream": "outbound",
  "ID": 42,
  "Type": "SpamComplaint",
  "TypeCode": 512,
  "Name": "Spam complaint",
  "Tag": "Test",
  "MessageID": "00000000-0000-0000-0000-000000000000",
  "Metadata" : {"a_key" : "a_value", "b_key": "b_value"},
  "ServerID": 1234,
  "Description": "",
  "Details": "Test spam complaint details",
  "Email": "john@example.com",
  "From": "sender@example.com",
  "BouncedAt": "2019-11-05T16:33:54.9070259Z",
  "DumpAvailable": true,
  "Inactive": true,
  "CanActivate": false,
  "Subject": "Test subject",
  "Content": "<Abuse report dump>"
})json";

inline constexpr char kPostmarkDelivery[] = R"json({
  "RecordType": "Delivery",
  "ServerID": 23,
  "MessageStream": "outbound",
  "MessageID": "00000000-0000-0000-0000-000000000000",
  "Recipient": "john@example.com",
  "Tag": "welcome-email",
  "DeliveredAt": "2019-11-05T16:33:54.9070259Z",
  "Details": "Test delivery webhook details",
  "Metadata" : {"a_key" : "a_value", "b_key": "b_value"}
})json";

inline constexpr char kPostmarkOpen[] = R"json({
  "RecordType": "Open",
  "MessageStream": "outbound",
  "FirstOpen": true,
  "Client": {"Name": "Chrome 35.0.1916.153", "Company": "Google", "Family": "Chrome"},
  "OS": {"Name": "OS X 10.7 Lion", "Company": "Apple Computer, Inc.", "Family": "OS X 10"},
  "Platform": "WebMail",
  "UserAgent": "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_7_5)",
  "ReadSeconds": 5,
  "Geo": {},
  "MessageID": "00000000-0000-0000-0000-000000000000",
  "Metadata" : {"a_key" : "a_value", "b_key": "b_value"},
  "ReceivedAt": "2019-11-05T16:33:54.9070259Z",
  "Tag": "welcome-email",
  "Recipient": "john@example.com"
})json";

// SendGrid posts events in batches, one JSON array per request.
inline constexpr char kSendgridEvents[] = R"json([
  {"email": "example@test.com", "timestamp": 1513299569, "smtp-id": "<14c5d75ce93.dfd.64b469@ismtpd-555>", "event": "processed", "category": "cat facts", "sg_event_id": "rbtnWrG1DVDGGGFHFyun0A==", "sg_message_id": "14c5d75ce93.dfd.64b469.filter0001.16648.5515E0B88.000000000000000000000"},
  {"email": "example@test.com", "timestamp": 1513299569, "smtp-id": "<14c5d75ce93.dfd.64b469@ismtpd-555>", "event": "deferred", "category": "cat facts", "sg_event_id": "KZbQ9LhR2VqT1ENG5xbg3w==", "sg_message_id": "14c5d75ce93.dfd.64b469.filter0001.16648.5515E0B88.000000000000000000000", "response": "400 try again later", "attempt": "5"},
  {"email": "example@test.com", "timestamp": 1513299569, "smtp-id": "<14c5d75ce93.dfd.64b469@ismtpd-555>", "event": "delivered", "category": "cat facts", "sg_event_id": "rWVYmVk90MjZJ9iohOBa3w==", "sg_message_id": "14c5d75ce93.dfd.64b469.filter0001.16648.5515E0B88.000000000000000000000", "response": "250 OK"},
  {"email": "example@test.com", "timestamp": 1513299569, "smtp-id": "<14c5d75ce93.dfd.64b469@ismtpd-555>", "event": "open", "category": "cat facts", "sg_event_id": "FOTFFO0ecsBE-zxFXfs6WA==", "sg_message_id": "14c5d75ce93.dfd.64b469.filter0001.16648.5515E0B88.000000000000000000000", "useragent": "Mozilla/4.0 (compatible; MSIE 6.1; Windows XP; .NET CLR 1.1.4322; .NET CLR 2.0.50727)", "ip": "255.255.255.255"},
  {"email": "example@test.com", "timestamp": 1513299569, "smtp-id": "<14c5d75ce93.dfd.64b469@ismtpd-555>", "event": "bounce", "category": "cat facts", "sg_event_id": "6g4ZI7SA-xmRDv57GoPIPw==", "sg_message_id": "14c5d75ce93.dfd.64b469.filter0001.16648.5515E0B88.000000000000000000000", "reason": "500 unknown recipient", "status": "5.0.0", "type": "bounce"},
  {"email": "example@test.com", "timestamp": 1513299569, "smtp-id": "<14c5d75ce93.dfd.64b469@ismtpd-555>", "event": "spamreport", "category": "cat facts", "sg_event_id": "37nvH5QBz858KGVYCM4uOA==", "sg_message_id": "14c5d75ce93.dfd.64b469.filter0001.16648.5515E0B88.000000000000000000000"}
])json";

inline constexpr char kMailgunPermanentFailure[] = R"json({
  "signature": {
    "timestamp": "1529006854",
    "token": "a8ce0edb2dd8301dee6c2405235584e45aa91d1e9f979f3de0",
    "signature": "d2271d12299f6592d9d44cd9d250f0704e4674c30d79d07c47a66f95ce71cf55"
  },
  "event-data": {
    "event": "failed",
    "id": "G9Bn5sl1TC6nu79C8C0bwg",
    "timestamp": 1521233195.375624,
    "log-level": "error",
    "severity": "permanent",
    "reason": "suppress-bounce",
    "envelope": {"sender": "bob@sandbox.mailgun.org", "transport": "smtp", "targets": "alice@example.com"},
    "flags": {"is-routed": false, "is-authenticated": true, "is-system-test": false, "is-test-mode": false},
    "delivery-status": {"attempt-no": 1, "message": "", "code": 605, "description": "Not delivering to previously bounced address", "session-seconds": 0.0},
    "message": {
      "headers": {"to": "Alice <alice@example.com>", "message-id": "20130503182626.18666.16540@sandbox.mailgun.org", "from": "Bob <bob@sandbox.mailgun.org>", "subject": "Test permanent_fail webhook"},
      "attachments": [],
      "size": 111
    },
    "recipient": "alice@example.com",
    "recipient-domain": "example.com",
    "storage": {"url": "https://se.api.mailgun.net/v3/domains/sandbox.mailgun.org/messages/message_key", "key": "message_key"},
    "campaigns": [],
    "tags": ["my_tag_1", "my_tag_2"],
    "user-variables": {"my_var_1": "Mailgun Variable #1", "my-var-2": "awesome"}
  }
})json";

inline constexpr char kResendBounced[] = R"json({
  "type": "email.bounced",
  "created_at": "2024-11-22T23:41:12.126Z",
  "data": {
    "broadcast_id": "8b146471-e88e-4322-86af-016cd36fd216",
    "created_at": "2024-11-22T23:41:11.894719+00:00",
    "email_id": "56761188-7520-42d8-8898-ff6fc54ce618",
    "from": "Acme <onboarding@resend.dev>",
    "to": ["delivered@resend.dev"],
    "subject": "Sending this example",
    "template_id": "43f68331-0622-4e15-8202-246a0388854b",
    "bounce": {
      "message": "The recipient's email address is on the suppression list because it has a recent history of producing hard bounces.",
      "subType": "Suppressed",
      "type": "Permanent"
    },
    "tags": {"category": "confirm_email"}
  }
})json";

inline constexpr char kResendComplained[] = R"json({
  "type": "email.complained",
  "created_at": "2024-11-22T23:41:12.126Z",
  "data": {
    "broadcast_id": "8b146471-e88e-4322-86af-016cd36fd216",
    "created_at": "2024-11-22T23:41:11.894719+00:00",
    "email_id": "56761188-7520-42d8-8898-ff6fc54ce618",
    "from": "Acme <onboarding@resend.dev>",
    "to": ["delivered@resend.dev"],
    "subject": "Sending this example",
    "template_id": "43f68331-0622-4e15-8202-246a0388854b",
    "tags": {"category": "confirm_email"}
  }
})json";

inline constexpr char kResendOpened[] = R"json({
  "type": "email.opened",
  "created_at": "2024-11-22T23:41:12.126Z",
  "data": {
    "created_at": "2024-11-22T23:41:11.894719+00:00",
    "email_id": "56761188-7520-42d8-8898-ff6fc54ce618",
    "from": "Acme <onboarding@resend.dev>",
    "to": ["delivered@resend.dev"],
    "subject": "Sending this example"
  }
})json";

inline constexpr char kHttpReportBounced[] = R"json({
  "type": "email.bounced",
  "message_id": "msg_mailroom_4711",
  "job_id": "4711",
  "group": "mailroom",
  "recipients": ["bob@example.com"],
  "bounce_type": "permanent",
  "reason": "550 5.1.1 user unknown"
})json";

}  // namespace mailroom::testing
