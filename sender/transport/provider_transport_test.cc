// The provider transports (postmark, sendgrid, mailgun, resend): each request's shape as its
// provider documents it, the map from each provider's documented answers to Status, and each
// against its stand-in (sender/transport/testing/provider_standin.py), which checks the path,
// the credentials and the body as the provider would. The faults every transport shares are in
// conformance_test.
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "sender/transport/mailgun_transport.h"
#include "sender/transport/postmark_transport.h"
#include "sender/transport/provider_transport.h"
#include "sender/transport/resend_transport.h"
#include "sender/transport/sendgrid_transport.h"
#include "sender/transport/testing/transport_peers.h"

namespace mailroom {
namespace {

using ::mailroom::testing::FreePort;
using ::mailroom::testing::Process;
using ::testing::HasSubstr;
using transport_testing::Slurp;
using transport_testing::TransportTest;

constexpr char kKey[] = "pr0vider-k3y";

OutgoingEmail Job(uint64_t job, const std::string& to = "ok-1@example.test") {
  OutgoingEmail e{"no-reply@example.test", to, "From: x\r\n\r\nx\r\n", "id@example.test"};
  e.tags = {{"mailroom_job", absl::StrCat(job)}, {"mailroom_action", "password_recovery"}};
  e.content = {job,
               "password_recovery",
               1,
               "\"Example Inc\" <no-reply@example.test>",
               "Reset your password",
               "Your code is 12345",
               "<p>Your code is 12345</p>",
               "de",
               absl::InfinitePast()};
  return e;
}

TEST(PostmarkTransportTest, BodyIsOneMessageWithMetadataAndNoTracking) {
  TransportConfig c;
  c.group = "mailroom";
  c.Mutable<ProviderSettings>().postmark_message_stream = "outbound";
  auto body = nlohmann::json::parse(PostmarkTransport::Body(Job(7), c));
  EXPECT_EQ(body["From"], "\"Example Inc\" <no-reply@example.test>");
  EXPECT_EQ(body["To"], "ok-1@example.test");
  EXPECT_EQ(body["Subject"], "Reset your password");
  EXPECT_EQ(body["TextBody"], "Your code is 12345");
  EXPECT_EQ(body["HtmlBody"], "<p>Your code is 12345</p>");
  EXPECT_EQ(body["MessageStream"], "outbound");
  EXPECT_EQ(body["Tag"], "password_recovery");
  EXPECT_EQ(body["Metadata"], (nlohmann::json{{"mailroom_job", "7"},
                                              {"mailroom_action", "password_recovery"},
                                              {"mailroom_group", "mailroom"}}));
  EXPECT_EQ(body["TrackOpens"], false);
  EXPECT_EQ(body["TrackLinks"], "None");
}

TEST(PostmarkTransportTest, ErrorCodesDecideTheKindOfFailure) {
  auto st = [](long http, int code, const std::string& message = "m") {
    return PostmarkTransport::ResponseStatus(
        http, nlohmann::json{{"ErrorCode", code}, {"Message", message}}.dump());
  };
  EXPECT_TRUE(st(200, 0).ok());
  EXPECT_TRUE(IsRecipientRejected(st(422, 406)));
  EXPECT_EQ(st(422, 406, "inactive").message(), "postmark 422 ErrorCode 406: inactive");
  for (int code : {10, 100, 400, 401, 405, 412, 413}) {
    EXPECT_TRUE(IsProviderError(st(422, code))) << code;
  }
  EXPECT_TRUE(IsProviderError(st(422, 1235, "The MessageStream 'x' was not found")));
  EXPECT_EQ(st(422, 300).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(IsRecipientRejected(st(422, 300)));
  EXPECT_TRUE(IsProviderError(st(401, 10)));
  EXPECT_TRUE(IsProviderError(st(429, 0)));
  EXPECT_TRUE(IsProviderError(st(503, 0)));
  EXPECT_TRUE(IsProviderError(PostmarkTransport::ResponseStatus(500, "<html>oops</html>")));
}

TEST(SendgridTransportTest, BodyIsOnePersonalizationWithCustomArgsAndNoTracking) {
  auto body = nlohmann::json::parse(SendgridTransport::Body(Job(8), "grp"));
  const auto& p = body["personalizations"][0];
  EXPECT_EQ(p["to"][0]["email"], "ok-1@example.test");
  EXPECT_EQ(p["custom_args"], (nlohmann::json{{"mailroom_job", "8"},
                                              {"mailroom_action", "password_recovery"},
                                              {"mailroom_group", "grp"}}));
  EXPECT_EQ(body["from"],
            (nlohmann::json{{"email", "no-reply@example.test"}, {"name", "Example Inc"}}));
  EXPECT_EQ(body["subject"], "Reset your password");
  EXPECT_EQ(body["content"][0]["type"], "text/plain");
  EXPECT_EQ(body["content"][1]["type"], "text/html");
  EXPECT_EQ(body["tracking_settings"]["click_tracking"]["enable"], false);
  EXPECT_EQ(body["tracking_settings"]["open_tracking"]["enable"], false);
}

TEST(SendgridTransportTest, AnswersMapToStatus) {
  auto err = [](const std::string& field, const std::string& message) {
    return nlohmann::json{{"errors", {{{"field", field}, {"message", message}}}}}.dump();
  };
  EXPECT_TRUE(SendgridTransport::ResponseStatus(202, "").ok());
  absl::Status to = SendgridTransport::ResponseStatus(
      400, err("personalizations.0.to.0.email", "Does not contain a valid address."));
  EXPECT_TRUE(IsRecipientRejected(to)) << to;
  EXPECT_EQ(to.message(),
            "sendgrid 400: personalizations.0.to.0.email: Does not contain a valid address.");
  absl::Status subject = SendgridTransport::ResponseStatus(400, err("subject", "required"));
  EXPECT_EQ(subject.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(IsRecipientRejected(subject));
  EXPECT_TRUE(IsProviderError(SendgridTransport::ResponseStatus(
      403, err("from", "The from address does not match a verified Sender Identity."))));
  EXPECT_TRUE(IsProviderError(SendgridTransport::ResponseStatus(401, err("", "denied"))));
  EXPECT_TRUE(IsProviderError(SendgridTransport::ResponseStatus(429, "")));
  EXPECT_TRUE(IsProviderError(SendgridTransport::ResponseStatus(500, "")));
}

TEST(MailgunTransportTest, BodyIsAFormWithUserVariablesAndNoTracking) {
  const std::string body = MailgunTransport::Body(Job(9), "grp");
  EXPECT_THAT(body, HasSubstr("from=%22Example%20Inc%22%20%3Cno-reply%40example.test%3E"));
  EXPECT_THAT(body, HasSubstr("&to=ok-1%40example.test&"));
  EXPECT_THAT(body, HasSubstr("&subject=Reset%20your%20password&"));
  EXPECT_THAT(body, HasSubstr("&o%3Atracking-clicks=no&o%3Atracking-opens=no&"));
  EXPECT_THAT(body, HasSubstr("&o%3Atag=password_recovery&"));
  EXPECT_THAT(body, HasSubstr("&v%3Amailroom_job=9&"));
  EXPECT_THAT(body, HasSubstr("&v%3Amailroom_group=grp"));
}

TEST(MailgunTransportTest, AnswersMapToStatus) {
  auto msg = [](const std::string& m) { return nlohmann::json{{"message", m}}.dump(); };
  EXPECT_TRUE(MailgunTransport::ResponseStatus(200, msg("Queued. Thank you.")).ok());
  absl::Status to = MailgunTransport::ResponseStatus(
      400, msg("'to' parameter is not a valid address. please check documentation"));
  EXPECT_TRUE(IsRecipientRejected(to)) << to;
  absl::Status from = MailgunTransport::ResponseStatus(
      400, msg("'from' parameter is not a valid address. please check documentation"));
  EXPECT_EQ(from.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(IsRecipientRejected(from));
  absl::Status forbidden = MailgunTransport::ResponseStatus(401, "Forbidden");
  EXPECT_TRUE(IsProviderError(forbidden));
  EXPECT_EQ(forbidden.message(), "mailgun 401: Forbidden");
  EXPECT_TRUE(IsProviderError(MailgunTransport::ResponseStatus(404, msg("Domain not found"))));
  EXPECT_TRUE(IsProviderError(MailgunTransport::ResponseStatus(429, msg("Too many requests"))));
  EXPECT_TRUE(IsProviderError(MailgunTransport::ResponseStatus(500, "")));
}

TEST(ResendTransportTest, BodyHasTagsAndTheKeyNamesTheJob) {
  auto body = nlohmann::json::parse(ResendTransport::Body(Job(10), "grp"));
  EXPECT_EQ(body["from"], "\"Example Inc\" <no-reply@example.test>");
  EXPECT_EQ(body["to"], nlohmann::json::array({"ok-1@example.test"}));
  EXPECT_EQ(body["subject"], "Reset your password");
  EXPECT_EQ(body["tags"][0], (nlohmann::json{{"name", "mailroom_job"}, {"value", "10"}}));
  EXPECT_EQ(body["tags"][2], (nlohmann::json{{"name", "mailroom_group"}, {"value", "grp"}}));
  // The same body on every try: nothing in it changes with the attempt.
  OutgoingEmail again = Job(10);
  again.content.attempt = 2;
  EXPECT_EQ(ResendTransport::Body(again, "grp"), ResendTransport::Body(Job(10), "grp"));
  EXPECT_EQ(ResendTransport::IdempotencyKey("grp", 10), "mailroom/grp/10");
}

TEST(ResendTransportTest, AnswersMapToStatus) {
  auto err = [](long code, const std::string& name, const std::string& m) {
    return nlohmann::json{{"statusCode", code}, {"name", name}, {"message", m}}.dump();
  };
  EXPECT_TRUE(ResendTransport::ResponseStatus(200, R"({"id":"x"})").ok());
  absl::Status to = ResendTransport::ResponseStatus(
      422, err(422, "validation_error", "Invalid `to` field. The email address needs ..."));
  EXPECT_TRUE(IsRecipientRejected(to)) << to;
  EXPECT_THAT(std::string(to.message()), HasSubstr("resend 422 validation_error: Invalid `to`"));
  absl::Status other = ResendTransport::ResponseStatus(422, err(422, "validation_error",
                                                                "Invalid `subject` field."));
  EXPECT_EQ(other.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(IsRecipientRejected(other));
  absl::Status replayed = ResendTransport::ResponseStatus(
      409, err(409, "invalid_idempotent_request",
               "Same idempotency key used with a different "
               "request payload."));
  EXPECT_TRUE(IsMaybeSent(replayed)) << replayed;
  absl::Status concurrent = ResendTransport::ResponseStatus(
      409, err(409, "concurrent_idempotent_requests", "in progress"));
  EXPECT_EQ(concurrent.code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(IsProviderError(concurrent));
  EXPECT_FALSE(IsMaybeSent(concurrent));
  EXPECT_TRUE(IsProviderError(ResendTransport::ResponseStatus(
      403, err(403, "validation_error", "The example.com domain is not verified."))));
  EXPECT_TRUE(IsProviderError(ResendTransport::ResponseStatus(
      429, err(429, "daily_quota_exceeded", "You have reached your daily email sending quota."))));
  EXPECT_TRUE(IsProviderError(ResendTransport::ResponseStatus(
      500, err(500, "application_error", "An unexpected error occurred."))));
}

// Each provider's transport against its stand-in: accepted with the provider's id, and a
// wrong key refused as a provider error that does not show the key.
class ProviderStandInTest : public TransportTest,
                            public ::testing::WithParamInterface<std::string> {
 protected:
  TransportConfig Start() {
    port_ = FreePort();
    auto p = Process::Spawn(
        {"/usr/bin/python3",
         ::mailroom::testing::Runfile("mailroom/sender/transport/testing/provider_standin.py"),
         "--port", absl::StrCat(port_), "--provider", GetParam(), "--key", kKey, "--domain",
         "mg.example.test"},
        {}, dir_ + "/standin.log");
    EXPECT_TRUE(p.ok());
    EXPECT_TRUE((*p)->WaitForLog("ready", absl::Seconds(20))) << (*p)->Log();
    peers_.push_back(*std::move(p));
    TransportConfig c;
    c.kind = GetParam();
    c.Mutable<ProviderSettings>().api_url = absl::StrCat("http://127.0.0.1:", port_, "/");
    c.Mutable<ProviderSettings>().api_key = kKey;
    c.Mutable<ProviderSettings>().mailgun_domain = "mg.example.test";
    c.group = "mailroom";
    c.connections = 2;
    c.timeout = absl::Seconds(10);
    return c;
  }
  std::unique_ptr<Transport> Make(const TransportConfig& c) {
    const std::string k = c.kind;
    if (k == "postmark") return std::make_unique<PostmarkTransport>(c);
    if (k == "sendgrid") return std::make_unique<SendgridTransport>(c);
    if (k == "mailgun") return std::make_unique<MailgunTransport>(c);
    return std::make_unique<ResendTransport>(c);
  }
  nlohmann::json State() {
    const std::string out = dir_ + "/state.json";
    std::system(
        absl::StrCat("curl -s http://127.0.0.1:", port_, "/_control/state > ", out).c_str());
    return nlohmann::json::parse(Slurp(out));
  }
  int port_ = 0;
};

TEST_P(ProviderStandInTest, AcceptedWithTheProvidersIdAndAWrongKeyHoldsEveryJob) {
  TransportConfig c = Start();
  auto t = Make(c);
  EXPECT_EQ(t->Name(), GetParam());
  auto sent = t->Send(Job(21));
  ASSERT_TRUE(sent.ok()) << sent.status();
  EXPECT_FALSE(sent->feedback_id.empty());
  EXPECT_EQ(sent->provider_id, sent->feedback_id);
  EXPECT_FALSE(absl::StrContains(sent->feedback_id, "<"));  // Mailgun's brackets removed
  nlohmann::json state = State();
  EXPECT_EQ(state["deliveries"]["21"], 1);
  EXPECT_EQ(state["refused"], 0);

  c.Mutable<ProviderSettings>().api_key = "wr0ng-k3y";
  auto refused = Make(c)->Send(Job(22));
  EXPECT_TRUE(IsProviderError(refused.status())) << refused.status();
  EXPECT_FALSE(IsMaybeSent(refused.status()));
  EXPECT_FALSE(absl::StrContains(refused.status().message(), "wr0ng"));
  EXPECT_EQ(State()["refused"], 1);
}

TEST_P(ProviderStandInTest, AnAnswerTooSlowForTheAttemptMayHaveBeenSent) {
  auto t = Make(Start());
  OutgoingEmail email = Job(23, "hang-23@example.test");
  email.timeout = absl::Milliseconds(500);  // what the job's lease leaves
  const absl::Time start = absl::Now();
  auto r = t->Send(email);
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_TRUE(IsMaybeSent(r.status())) << r.status();
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("(curl 28)"));
}

TEST_P(ProviderStandInTest, NothingListeningHoldsEveryJobAndNothingMayHaveBeenSent) {
  TransportConfig c = Start();
  c.Mutable<ProviderSettings>().api_url = absl::StrCat("http://127.0.0.1:", FreePort());
  auto r = Make(c)->Send(Job(24));
  EXPECT_TRUE(IsProviderError(r.status())) << r.status();
  EXPECT_FALSE(IsMaybeSent(r.status()));
}

INSTANTIATE_TEST_SUITE_P(EveryProvider, ProviderStandInTest,
                         ::testing::Values("postmark", "sendgrid", "mailgun", "resend"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace mailroom
