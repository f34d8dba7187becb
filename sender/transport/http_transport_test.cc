// The http transport against a receiver that verifies Standard Webhooks signatures and
// answers as each test tells it (sender/transport/testing/webhook_receiver.py); the map from its
// answers to Status.
#include "sender/transport/http_transport.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "sender/transport/testing/transport_peers.h"

namespace mailroom {
namespace {

using ::mailroom::testing::Process;
using ::testing::HasSubstr;
using ::testing::Not;
using transport_testing::Email;
using transport_testing::Slurp;
using transport_testing::TransportTest;

// 24 bytes, the secret of the Standard Webhooks specification's example.
constexpr char kSecret[] = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
constexpr char kOtherSecret[] = "whsec_bm90LXRoZS1yZWNlaXZlcnMtc2VjcmV0LWF0LWFsbA==";

std::string Receiver() {
  return ::mailroom::testing::Runfile("mailroom/sender/transport/testing/webhook_receiver.py");
}

class HttpTransportTest : public TransportTest {
 protected:
  // Starts the receiver; returns its URL.
  std::string StartReceiver(std::vector<std::string> extra = {}) {
    port_ = ::mailroom::testing::FreePort();
    std::vector<std::string> argv = {"/usr/bin/python3",  Receiver(), "serve", "--port",
                                     absl::StrCat(port_), "--secret", kSecret};
    argv.insert(argv.end(), extra.begin(), extra.end());
    if (std::find(extra.begin(), extra.end(), "--tls-cert") != extra.end()) scheme_ = "https";
    auto p = Process::Spawn(argv, {}, dir_ + "/receiver.log");
    EXPECT_TRUE(p.ok());
    EXPECT_TRUE((*p)->WaitForLog("ready", absl::Seconds(20))) << (*p)->Log();
    peers_.push_back(*std::move(p));
    return absl::StrCat(scheme_, "://127.0.0.1:", port_, "/hooks/mail");
  }
  // The receiver's control URL for `path` (its own certificate is not checked).
  std::string Control(const std::string& path) {
    return absl::StrCat(scheme_, "://127.0.0.1:", port_, "/_control/", path);
  }
  // Tells the receiver how to answer the next requests.
  void Script(const nlohmann::json& answers) {
    const std::string file = dir_ + "/script.json";
    std::ofstream(file) << nlohmann::json{{"answers", answers}}.dump();
    ASSERT_EQ(std::system(absl::StrCat("curl -skf -o /dev/null --data-binary @", file, " ",
                                       Control("script"))
                              .c_str()),
              0);
  }
  nlohmann::json State() {
    const std::string out = dir_ + "/state.json";
    std::system(absl::StrCat("curl -sk ", Control("state"), " > ", out).c_str());
    return nlohmann::json::parse(Slurp(out));
  }
  TransportConfig Http(const std::string& url, const std::string& secret = kSecret) {
    TransportConfig c;
    c.kind = "http";
    c.Mutable<HttpSettings>().url = url;
    c.Mutable<HttpSettings>().secret = secret;
    c.group = "mailroom";
    c.connections = 2;
    c.timeout = absl::Seconds(10);
    return c;
  }
  std::unique_ptr<HttpTransport> Make(const TransportConfig& c) {
    auto t = HttpTransport::Create(c);
    EXPECT_TRUE(t.ok()) << t.status();
    return *std::move(t);
  }
  // An email as the Renderer makes it for job `job`.
  static OutgoingEmail Job(uint64_t job, const std::string& to = "jane@example.test") {
    OutgoingEmail e = Email(to, static_cast<int>(job));
    e.content = {job,
                 "password_recovery",
                 1,
                 "Example <no-reply@example.test>",
                 "Reset your password",
                 "Your code is 12345",
                 "<p>Your code is 12345</p>",
                 "de-AT",
                 absl::FromUnixSeconds(1795000000)};
    return e;
  }

  int port_ = 0;
  std::string scheme_ = "http";
};

TEST_F(HttpTransportTest, SentWithTheReceiversMessageIdAndAVerifiedSignature) {
  auto t = Make(Http(StartReceiver()));
  OutgoingEmail email = Job(42);
  auto r = t->Send(email);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->provider_id, "rcv-1");
  EXPECT_EQ(r->feedback_id, "rcv-1");
  nlohmann::json state = State();
  EXPECT_EQ(state["refused"], 0);
  ASSERT_EQ(state["messages"].size(), 1u);
  const nlohmann::json& m = state["messages"][0];
  EXPECT_EQ(m["id"], "msg_mailroom_42");
  const nlohmann::json& b = m["body"];
  EXPECT_EQ(b["type"], "email.send");
  EXPECT_EQ(b["job_id"], "42");
  EXPECT_EQ(b["group"], "mailroom");
  EXPECT_EQ(b["attempt"], 1);
  EXPECT_EQ(b["action"], "password_recovery");
  EXPECT_EQ(b["to"], "jane@example.test");
  EXPECT_EQ(b["from"], "Example <no-reply@example.test>");
  EXPECT_EQ(b["subject"], "Reset your password");
  EXPECT_EQ(b["text"], "Your code is 12345");
  EXPECT_EQ(b["html"], "<p>Your code is 12345</p>");
  EXPECT_EQ(b["headers"]["Message-ID"], "<id42@example.test>");
  EXPECT_EQ(b["locale"], "de-AT");
  EXPECT_EQ(b["expires_at"], "2026-11-18T11:06:40Z");
  std::string mime;
  ASSERT_TRUE(absl::Base64Unescape(b["mime"].get<std::string>(), &mime));
  EXPECT_EQ(mime, email.mime);
}

TEST_F(HttpTransportTest, WithoutAMessageIdTheWebhookIdNamesTheEmail) {
  auto t = Make(Http(StartReceiver()));
  Script({{{"status", 204}, {"body", ""}}, {{"status", 200}, {"body", {{"message_id", "a\nb"}}}}});
  for (uint64_t job : {7, 8}) {
    auto r = t->Send(Job(job));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->feedback_id, absl::StrCat("msg_mailroom_", job));
  }
}

TEST_F(HttpTransportTest, ARejectionFailsTheEmailWithTheReceiversReason) {
  auto t = Make(Http(StartReceiver()));
  Script({{{"status", 400}, {"body", {{"reason", "mailbox\r\nfull"}}}},
          {{"status", 422}, {"body", {{"reason", "no such user"}, {"suppress", true}}}},
          {{"status", 400}, {"body", std::string(500, 'x')}}});
  auto full = t->Send(Job(1));
  EXPECT_EQ(full.status().code(), absl::StatusCode::kInvalidArgument) << full.status();
  EXPECT_FALSE(IsRecipientRejected(full.status()));
  EXPECT_EQ(full.status().message(), "http 400: mailbox  full");
  auto unknown = t->Send(Job(2));
  EXPECT_TRUE(IsRecipientRejected(unknown.status())) << unknown.status();
  EXPECT_EQ(unknown.status().message(), "http 422: no such user");
  auto long_body = t->Send(Job(3));
  EXPECT_EQ(long_body.status().message(), absl::StrCat("http 400: ", std::string(200, 'x')));
  EXPECT_EQ(State()["messages"].size(), 0u);  // refusals store nothing
}

TEST_F(HttpTransportTest, OverloadAndOutagesHoldEveryJobAConflictRetriesThisOne) {
  auto t = Make(Http(StartReceiver()));
  Script({{{"status", 429}},
          {{"status", 503}, {"body", "down for maintenance"}},
          {{"status", 408}},
          {{"status", 409}}});
  for (const char* what : {"http 429", "http 503: down for maintenance", "http 408"}) {
    auto r = t->Send(Job(5));
    EXPECT_TRUE(IsProviderError(r.status())) << r.status();
    EXPECT_FALSE(IsMaybeSent(r.status()));
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(what));
  }
  auto conflict = t->Send(Job(5));
  EXPECT_EQ(conflict.status().code(), absl::StatusCode::kUnavailable) << conflict.status();
  EXPECT_FALSE(IsProviderError(conflict.status()));
  EXPECT_TRUE(t->Send(Job(5)).ok());
  EXPECT_EQ(State()["messages"].size(), 1u);
  // Nothing listening: a provider error, and nothing may have been sent.
  auto refused =
      Make(Http(absl::StrCat("http://127.0.0.1:", ::mailroom::testing::FreePort())))->Send(Job(6));
  EXPECT_TRUE(IsProviderError(refused.status())) << refused.status();
  EXPECT_FALSE(IsMaybeSent(refused.status()));
}

TEST_F(HttpTransportTest, ALostAnswerMayHaveBeenSentAndItsRetryIsADuplicateToTheReceiver) {
  auto t = Make(Http(StartReceiver()));
  Script({{{"hang_ms", 3000}}, {{"close", true}}});
  OutgoingEmail email = Job(9);
  email.timeout = absl::Seconds(1);  // what the job's lease leaves: it caps the 10 s
  const absl::Time start = absl::Now();
  auto timed_out = t->Send(email);
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  EXPECT_TRUE(IsMaybeSent(timed_out.status())) << timed_out.status();
  EXPECT_THAT(std::string(timed_out.status().message()), HasSubstr("(curl 28)"));
  auto closed = t->Send(Job(10));
  EXPECT_TRUE(IsMaybeSent(closed.status())) << closed.status();
  // The one retry of each carries the same webhook-id: the receiver answers without storing.
  email.content.attempt = 2;
  auto again = t->Send(email);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->feedback_id, "rcv-1");
  ASSERT_TRUE(t->Send(Job(10)).ok());
  nlohmann::json state = State();
  EXPECT_EQ(state["messages"].size(), 2u);
  EXPECT_EQ(state["duplicates"], 2);
}

TEST_F(HttpTransportTest, AWrongSecretOrAuthorizationIsRefusedAndHoldsEveryJob) {
  const std::string url = StartReceiver({"--authorization", "Bearer t0ken"});
  TransportConfig good = Http(url);
  good.Mutable<HttpSettings>().authorization = "Bearer t0ken";
  // Rotation: the receiver knows only the newer secret; a signature per secret is sent.
  TransportConfig rotating = good;
  rotating.Mutable<HttpSettings>().secret = absl::StrCat(kOtherSecret, " ", kSecret);
  TransportConfig wrong_secret = good;
  wrong_secret.Mutable<HttpSettings>().secret = kOtherSecret;
  TransportConfig no_authorization = Http(url);
  for (const TransportConfig* c : {&wrong_secret, &no_authorization}) {
    auto r = Make(*c)->Send(Job(11));
    EXPECT_TRUE(IsProviderError(r.status())) << r.status();
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("http 401"));
    EXPECT_THAT(std::string(r.status().message()), Not(HasSubstr("t0ken")));
  }
  EXPECT_TRUE(Make(rotating)->Send(Job(12)).ok());
  EXPECT_TRUE(Make(good)->Send(Job(13)).ok());
  nlohmann::json state = State();
  EXPECT_EQ(state["refused"], 2);
  EXPECT_EQ(state["messages"].size(), 2u);
}

TEST_F(HttpTransportTest, HttpsIsVerifiedAndAnUntrustedCertificateHoldsEveryJob) {
  MakeCert();
  const std::string https = StartReceiver(
      {"--tls-cert", dir_ + "/cert.pem", "--tls-key", dir_ + "/key.pem"});
  auto untrusted = Make(Http(https))->Send(Job(16));
  EXPECT_TRUE(IsProviderError(untrusted.status())) << untrusted.status();
  EXPECT_FALSE(IsMaybeSent(untrusted.status()));
  TransportConfig trusted = Http(https);
  trusted.Mutable<HttpSettings>().ca_file = dir_ + "/cert.pem";
  auto sent = Make(trusted)->Send(Job(17));
  ASSERT_TRUE(sent.ok()) << sent.status();
  // Plain HTTP to a TLS port gets no answer it can read: not sent, nothing stored.
  EXPECT_FALSE(
      Make(Http(absl::StrCat("http://127.0.0.1:", port_, "/hooks/mail")))->Send(Job(18)).ok());
  EXPECT_EQ(State()["messages"].size(), 1u);
}

// The signature as any receiver checks it: the receiver's `verify` command line.
TEST_F(HttpTransportTest, TheSignatureVerifiesAndATamperedBodyDoesNot) {
  auto keys = HttpTransport::ParseSecrets(kSecret);
  ASSERT_TRUE(keys.ok()) << keys.status();
  const std::string body = HttpTransport::Body(Job(14), "mailroom");
  const std::string id = HttpTransport::WebhookId("mailroom", 14);
  const int64_t now = absl::ToUnixSeconds(absl::Now());
  const std::string signature = HttpTransport::Signature(*keys, id, now, body);
  auto verifies = [&](const std::string& b, const std::string& i, int64_t ts,
                      const std::string& secret, const std::string& sig) {
    const std::string file = dir_ + "/body.json";
    std::ofstream(file, std::ios::binary) << b;
    return std::system(absl::StrCat("/usr/bin/python3 ", Receiver(), " verify --secret ", secret,
                                    " --id ", i, " --timestamp ", ts, " --signature '", sig, "' < ",
                                    file, " > /dev/null")
                           .c_str()) == 0;
  };
  EXPECT_TRUE(verifies(body, id, now, kSecret, signature));
  std::string tampered = body;
  tampered.replace(tampered.find("jane@"), 5, "mall@");
  EXPECT_FALSE(verifies(tampered, id, now, kSecret, signature));
  EXPECT_FALSE(verifies(body, "msg_mailroom_15", now, kSecret, signature));
  EXPECT_FALSE(verifies(body, id, now + 1, kSecret, signature));
  EXPECT_FALSE(verifies(body, id, now, kOtherSecret, signature));
  // A request signed ten minutes ago, correctly, is refused for its timestamp (a replay).
  const int64_t old = now - 600;
  EXPECT_FALSE(verifies(body, id, old, kSecret, HttpTransport::Signature(*keys, id, old, body)));
  EXPECT_TRUE(
      verifies(body, id, now - 60, kSecret, HttpTransport::Signature(*keys, id, now - 60, body)));
}

// The example of the Standard Webhooks specification (and of its reference libraries' tests).
TEST(HttpSignatureTest, TheSpecificationsExample) {
  auto keys = HttpTransport::ParseSecrets(kSecret);
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ(HttpTransport::Signature(*keys, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330,
                                     "{\"test\": 2432232314}"),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
}

TEST(HttpTransportSecretsTest, SecretsParseAndErrorsNeverShowThem) {
  auto one = HttpTransport::ParseSecrets(kSecret);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0].size(), 24u);
  auto two = HttpTransport::ParseSecrets(absl::StrCat(" ", kSecret, "  ", kOtherSecret, " "));
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(two->size(), 2u);
  for (const char* bad : {"", "  ", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
                          "whsec_c2hvcnQ=", "whsec_not*base64*at*all*but*long*enough"}) {
    auto st = HttpTransport::ParseSecrets(bad).status();
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(st.message()), HasSubstr("MAILROOM_HTTP_SECRET"));
    if (std::string(bad).size() > 6) {
      EXPECT_THAT(std::string(st.message()), Not(HasSubstr(std::string(bad).substr(6))));
    }
  }
  auto second = HttpTransport::ParseSecrets(absl::StrCat(kSecret, " whsec_c2hvcnQ="));
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("secret 2"));
}

TEST(HttpResponseTest, WhatEachAnswerMeans) {
  for (long ok : {200, 201, 202, 204}) EXPECT_TRUE(HttpTransport::ResponseStatus(ok, "").ok());
  for (long provider : {301, 302, 401, 403, 404, 405, 407, 408, 410, 429, 500, 502, 503, 504}) {
    auto st = HttpTransport::ResponseStatus(provider, "{\"message\":\"why\"}");
    EXPECT_TRUE(IsProviderError(st)) << provider << ": " << st;
    EXPECT_EQ(st.message(), absl::StrCat("http ", provider, ": why"));
  }
  auto conflict = HttpTransport::ResponseStatus(409, "");
  EXPECT_EQ(conflict.code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(IsProviderError(conflict));
  EXPECT_EQ(conflict.message(), "http 409");
  EXPECT_EQ(HttpTransport::ResponseStatus(503, " {} ").message(), "http 503");
  for (long rejected : {400, 413, 415, 422, 451}) {
    auto st = HttpTransport::ResponseStatus(rejected, "{\"error\":\"bad\"}");
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << rejected;
    EXPECT_FALSE(IsRecipientRejected(st));
  }
  EXPECT_TRUE(IsRecipientRejected(HttpTransport::ResponseStatus(400, "{\"suppress\":true}")));
  EXPECT_FALSE(IsRecipientRejected(HttpTransport::ResponseStatus(400, "{\"suppress\":\"yes\"}")));
  // Bytes that are not UTF-8 are replaced: the reason goes into a protobuf string.
  EXPECT_EQ(HttpTransport::ResponseStatus(400, "caf\xe9").message(), "http 400: caf\xef\xbf\xbd");
}

TEST(HttpMessageIdTest, OnlyAnIdTheCollectorCanStore) {
  EXPECT_EQ(HttpTransport::MessageIdOf("{\"message_id\":\"0100-abc@example\"}"),
            "0100-abc@example");
  for (const char* unusable : {"", "not json", "{\"message_id\":12}", "{\"message_id\":\"\"}",
                               "{\"message_id\":\"a b\"}", "{\"id\":\"x\"}", "[\"message_id\"]"}) {
    EXPECT_EQ(HttpTransport::MessageIdOf(unusable), "") << unusable;
  }
  EXPECT_EQ(HttpTransport::MessageIdOf(
                absl::StrCat("{\"message_id\":\"", std::string(257, 'a'), "\"}")),
            "");
}

}  // namespace
}  // namespace mailroom
