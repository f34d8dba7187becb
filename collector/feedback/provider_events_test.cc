#include "collector/feedback/provider_events.h"

#include "collector/feedback/testing/provider_samples.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mailroom {
namespace {

using ::testing::ElementsAre;

absl::Time Utc(const char* rfc3339) {
  absl::Time t;
  std::string err;
  EXPECT_TRUE(absl::ParseTime(absl::RFC3339_full, rfc3339, &t, &err)) << err;
  return t;
}

TEST(Postmark, TheDocumentedBounceIsAPermanentBounce) {
  auto p = ParsePostmark(testing::kPostmarkBounce);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->id, "bounce:4323372036854775807");
  EXPECT_EQ(p->at, Utc("2019-11-05T16:33:54.9070259Z"));
  EXPECT_EQ(p->event.provider, "postmark");
  EXPECT_EQ(p->event.type, "Bounce");
  EXPECT_EQ(p->event.bounce_type, "Permanent");
  EXPECT_EQ(p->event.detail, "HardBounce");
  EXPECT_THAT(p->event.message_ids, ElementsAre("883953f4-6105-42a2-a16a-77a8eac79483"));
  EXPECT_THAT(p->event.recipients, ElementsAre("john@example.com"));
  EXPECT_EQ(p->event.job_id, 0u);
}

TEST(Postmark, ComplaintDeliveryAndWhatIsIgnored) {
  auto c = ParsePostmark(testing::kPostmarkSpamComplaint);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->id, "complaint:42");
  EXPECT_EQ(c->event.type, "Complaint");
  EXPECT_THAT(c->event.recipients, ElementsAre("john@example.com"));
  auto d = ParsePostmark(testing::kPostmarkDelivery);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->event.type, "Delivery");
  EXPECT_EQ(d->id, "delivery:00000000-0000-0000-0000-000000000000:john@example.com");
  auto o = ParsePostmark(testing::kPostmarkOpen);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->event.type, "");  // acknowledged, not recorded
  // A soft bounce counts as SES's transient ones; an auto-responder is no bounce of the address.
  std::string soft = testing::kPostmarkBounce;
  soft.replace(soft.find("\"HardBounce\""), 12, "\"SoftBounce\"");
  EXPECT_EQ(ParsePostmark(soft)->event.bounce_type, "Transient");
  std::string auto_reply = testing::kPostmarkBounce;
  auto_reply.replace(auto_reply.find("\"HardBounce\""), 12, "\"AutoResponder\"");
  EXPECT_EQ(ParsePostmark(auto_reply)->event.type, "");
  // The sender's tags in Metadata name the job.
  std::string tagged = testing::kPostmarkBounce;
  tagged.replace(tagged.find("\"a_key\" : \"a_value\""), 19,
                 "\"mailroom_job\": \"4711\", \"mailroom_group\": \"mailroom\"");
  auto t = ParsePostmark(tagged);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->event.job_id, 4711u);
  EXPECT_EQ(t->event.group, "mailroom");
}

TEST(Postmark, WhatIsNotAWebhookIsRefused) {
  EXPECT_FALSE(ParsePostmark("[]").ok());
  EXPECT_FALSE(ParsePostmark("{}").ok());
  EXPECT_FALSE(ParsePostmark("not json").ok());
  EXPECT_FALSE(ParsePostmark(R"({"RecordType": "Bounce", "Type": "HardBounce", "ID": 1,
      "MessageID": "m", "Email": "a@b.c"})")
                   .ok());  // no BouncedAt
  EXPECT_FALSE(ParsePostmark(R"({"RecordType": "Bounce", "Type": "HardBounce", "ID": 1,
      "BouncedAt": "2019-11-05T16:33:54Z", "MessageID": "m"})")
                   .ok());  // no address
  EXPECT_EQ(ParsePostmark(R"({"a":{"b":{"c":{"d":{"e":{"f":{"g":{"h":{"i":{"j":{}}}}}}}}}}})")
                .status()
                .message(),
            "JSON nested too deeply");
}

TEST(Sendgrid, TheDocumentedEventsAreReadOneByOne) {
  auto events = ParseSendgrid(testing::kSendgridEvents);
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 6u);
  std::vector<std::string> types;
  for (const ProviderEvent& e : *events) types.push_back(e.event.type);
  EXPECT_THAT(types, ElementsAre("", "", "Delivery", "", "Bounce", "Complaint"));
  const ProviderEvent& bounce = (*events)[4];
  EXPECT_EQ(bounce.id, "6g4ZI7SA-xmRDv57GoPIPw==");
  EXPECT_EQ(bounce.at, absl::FromUnixSeconds(1513299569));
  EXPECT_EQ(bounce.event.bounce_type, "Permanent");
  EXPECT_EQ(bounce.event.detail, "bounce 5.0.0");
  EXPECT_THAT(bounce.event.recipients, ElementsAre("example@test.com"));
  // Whole, and as the API's X-Message-Id (before the first dot).
  EXPECT_THAT(bounce.event.message_ids,
              ElementsAre("14c5d75ce93.dfd.64b469.filter0001.16648.5515E0B88.000000000000000000000",
                          "14c5d75ce93"));
  auto blocked = ParseSendgrid(R"([{"email": "a@b.c", "timestamp": 1513299569,
      "event": "bounce", "type": "blocked", "sg_event_id": "x", "sg_message_id": "m.f"}])");
  ASSERT_TRUE(blocked.ok()) << blocked.status();
  EXPECT_EQ((*blocked)[0].event.bounce_type, "Transient");
  EXPECT_FALSE(ParseSendgrid("{}").ok());
  EXPECT_FALSE(ParseSendgrid("[]").ok());
  EXPECT_FALSE(ParseSendgrid(R"([{"event": "bounce", "email": "a@b.c", "sg_message_id": "m"}])")
                   .ok());  // no event id
}

TEST(Mailgun, TheDocumentedPermanentFailureIsAPermanentBounce) {
  MailgunSignature sig;
  auto p = ParseMailgun(testing::kMailgunPermanentFailure, &sig);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(sig.timestamp, "1529006854");
  EXPECT_EQ(sig.token, "a8ce0edb2dd8301dee6c2405235584e45aa91d1e9f979f3de0");
  EXPECT_EQ(sig.signature, "d2271d12299f6592d9d44cd9d250f0704e4674c30d79d07c47a66f95ce71cf55");
  // Mailgun signs the timestamp and the token, not the body: the token, single-use, is the
  // event's key, so that a captured signature cannot carry a second body.
  EXPECT_EQ(p->id, "a8ce0edb2dd8301dee6c2405235584e45aa91d1e9f979f3de0");
  EXPECT_EQ(p->at, absl::FromUnixMicros(1521233195375624));
  EXPECT_EQ(p->event.type, "Bounce");
  EXPECT_EQ(p->event.bounce_type, "Permanent");
  EXPECT_EQ(p->event.detail, "suppress-bounce 605");
  EXPECT_THAT(p->event.recipients, ElementsAre("alice@example.com"));
  EXPECT_THAT(p->event.message_ids,
              ElementsAre("20130503182626.18666.16540@sandbox.mailgun.org",
                          "<20130503182626.18666.16540@sandbox.mailgun.org>"));
  // Given up after retrying ("old"): a soft bounce; a temporary failure: Mailgun retries it.
  std::string old = testing::kMailgunPermanentFailure;
  old.replace(old.find("\"suppress-bounce\""), 17, "\"old\"");
  EXPECT_EQ(ParseMailgun(old, &sig)->event.bounce_type, "Transient");
  std::string temporary = testing::kMailgunPermanentFailure;
  temporary.replace(temporary.find("\"permanent\""), 11, "\"temporary\"");
  EXPECT_EQ(ParseMailgun(temporary, &sig)->event.type, "");
  EXPECT_FALSE(ParseMailgun(R"({"signature": {}})", &sig).ok());
}

TEST(Resend, TheDocumentedEvents) {
  auto b = ParseResend(testing::kResendBounced, "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->id, "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W");
  EXPECT_EQ(b->at, Utc("2024-11-22T23:41:12.126Z"));
  EXPECT_EQ(b->event.type, "Bounce");
  EXPECT_EQ(b->event.bounce_type, "Permanent");
  EXPECT_EQ(b->event.detail, "Suppressed");
  EXPECT_THAT(b->event.message_ids, ElementsAre("56761188-7520-42d8-8898-ff6fc54ce618"));
  EXPECT_THAT(b->event.recipients, ElementsAre("delivered@resend.dev"));
  auto c = ParseResend(testing::kResendComplained, "msg_1");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->event.type, "Complaint");
  auto o = ParseResend(testing::kResendOpened, "msg_2");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->event.type, "");
  EXPECT_FALSE(ParseResend(testing::kResendBounced, "").ok());  // no svix-id
}

TEST(HttpReport, TheDocumentedShape) {
  auto r = ParseHttpReport(testing::kHttpReportBounced, "evt_1");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->event.provider, "http");
  EXPECT_EQ(r->event.type, "Bounce");
  EXPECT_EQ(r->event.bounce_type, "Permanent");
  EXPECT_EQ(r->event.job_id, 4711u);
  EXPECT_EQ(r->event.group, "mailroom");
  EXPECT_EQ(r->event.detail, "550 5.1.1 user unknown");
  EXPECT_THAT(r->event.message_ids, ElementsAre("msg_mailroom_4711"));
  EXPECT_FALSE(ParseHttpReport(R"({"type": "email.bounced", "message_id": "m",
      "recipients": ["a@b.c"], "bounce_type": "hard"})",
                               "evt_2")
                   .ok());
  EXPECT_EQ(ParseHttpReport(R"({"type": "email.opened", "message_id": "m"})", "evt_3")->event.type,
            "");
}

}  // namespace
}  // namespace mailroom
