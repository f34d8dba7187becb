// ParseSesEvent on SES event publishing records (eventType) and the older identity
// notifications (notificationType), as SES documents them.
#include "collector/feedback/feedback_event.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mailroom {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ParseSesEventTest, PermanentBounceWithTags) {
  auto e = ParseSesEvent(R"({
    "eventType": "Bounce",
    "bounce": {"bounceType": "Permanent", "bounceSubType": "General",
               "bouncedRecipients": [{"emailAddress": "gone@example.test", "action": "failed",
                                      "status": "5.1.1"}],
               "timestamp": "2026-11-23T10:00:00.000Z", "feedbackId": "f1"},
    "mail": {"timestamp": "2026-11-23T09:59:59.000Z", "source": "no-reply@example.test",
             "messageId": "0100018c-abc", "destination": ["gone@example.test"],
             "tags": {"mailroom_job": ["42"], "mailroom_group": ["mailroom"],
                      "mailroom_action": ["activation"], "ses:configuration-set": ["cs"]}}})");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->type, "Bounce");
  EXPECT_EQ(e->bounce_type, "Permanent");
  EXPECT_EQ(e->detail, "General");
  EXPECT_EQ(e->ses_message_id, "0100018c-abc");
  EXPECT_EQ(e->group, "mailroom");
  EXPECT_EQ(e->job_id, 42u);
  EXPECT_THAT(e->recipients, ElementsAre("gone@example.test"));
}

TEST(ParseSesEventTest, ComplaintDeliveryRejectAndTheNotificationForm) {
  auto c = ParseSesEvent(R"({"notificationType": "Complaint",
    "complaint": {"complainedRecipients": [{"emailAddress": "angry@example.test"}],
                  "complaintFeedbackType": "abuse"},
    "mail": {"messageId": "m-2"}})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->type, "Complaint");
  EXPECT_EQ(c->detail, "abuse");
  EXPECT_EQ(c->job_id, 0u);
  EXPECT_THAT(c->recipients, ElementsAre("angry@example.test"));

  auto d = ParseSesEvent(R"({"eventType": "Delivery",
    "delivery": {"recipients": ["ok@example.test"], "smtpResponse": "250 ok"},
    "mail": {"messageId": "m-3"}})");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->type, "Delivery");
  EXPECT_THAT(d->recipients, ElementsAre("ok@example.test"));

  auto r = ParseSesEvent(R"({"eventType": "Reject", "reject": {"reason": "Bad content"},
    "mail": {"messageId": "m-4"}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->detail, "Bad content");
}

TEST(ParseSesEventTest, OtherEventTypesAreNotRecorded) {
  for (const char* type : {"Send", "Open", "Click", "DeliveryDelay", "Rendering Failure"}) {
    auto e = ParseSesEvent(std::string(R"({"eventType": ")") + type +
                           R"(", "mail": {"messageId": "m"}})");
    EXPECT_EQ(e.status().code(), absl::StatusCode::kUnimplemented) << type;
  }
}

TEST(ParseSesEventTest, MalformedEventsAreInvalid) {
  for (const char* bad :
       {"", "nope", "[]", R"({"mail": {"messageId": "m"}})",
        R"({"eventType": "Bounce", "bounce": {"bounceType": "Permanent",
               "bouncedRecipients": [{"emailAddress": "x@example.test"}]}})",
        R"({"eventType": "Bounce", "mail": {"messageId": "m"},
               "bounce": {"bounceType": "Sideways",
                          "bouncedRecipients": [{"emailAddress": "x@example.test"}]}})",
        R"({"eventType": "Bounce", "mail": {"messageId": "m"},
               "bounce": {"bounceType": "Permanent", "bouncedRecipients": []}})",
        R"({"eventType": "Complaint", "mail": {"messageId": "m"}, "complaint": {}})",
        R"({"eventType": "Delivery", "mail": {}})"}) {
    EXPECT_EQ(ParseSesEvent(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_THAT(std::string(ParseSesEvent(R"({"mail": {}})").status().message()),
              HasSubstr("eventType"));
}

}  // namespace
}  // namespace mailroom
