// The sandbox transport: its answer for each simulator address, and its events posted to a
// receiver that verifies Standard Webhooks signatures and answers as told
// (sender/transport/testing/webhook_receiver.py, standing in for the collector's
// /feedback/sandbox): in order, retried under the same id after a 503 and under a new one after
// "unmatched", dropped after a refusal, and left when stopped.
#include "sender/transport/sandbox_transport.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "sender/transport/testing/transport_peers.h"

namespace mailroom {
namespace {

using ::mailroom::testing::Process;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using transport_testing::Email;
using transport_testing::Slurp;
using transport_testing::TransportTest;
using Scenario = SandboxTransport::Scenario;

constexpr char kSecret[] = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

class SandboxTransportTest : public TransportTest {
 protected:
  // Starts the receiver; returns the URL events go to.
  std::string StartReceiver() {
    port_ = ::mailroom::testing::FreePort();
    auto p = Process::Spawn(
        {"/usr/bin/python3",
         ::mailroom::testing::Runfile("mailroom/sender/transport/testing/webhook_receiver.py"),
         "serve", "--port", absl::StrCat(port_), "--secret", kSecret},
        {}, dir_ + "/receiver.log");
    EXPECT_TRUE(p.ok());
    EXPECT_TRUE((*p)->WaitForLog("ready", absl::Seconds(20))) << (*p)->Log();
    peers_.push_back(*std::move(p));
    return absl::StrCat("http://127.0.0.1:", port_, "/feedback/sandbox");
  }
  void Script(const nlohmann::json& answers) {
    const std::string file = dir_ + "/script.json";
    std::ofstream(file) << nlohmann::json{{"answers", answers}}.dump();
    ASSERT_EQ(std::system(absl::StrCat("curl -sf -o /dev/null --data-binary @", file,
                                       " http://127.0.0.1:", port_, "/_control/script")
                              .c_str()),
              0);
  }
  nlohmann::json State() {
    const std::string out = dir_ + "/state.json";
    std::system(
        absl::StrCat("curl -s http://127.0.0.1:", port_, "/_control/state > ", out).c_str());
    return nlohmann::json::parse(Slurp(out));
  }
  TransportConfig Sandbox(const std::string& url) {
    TransportConfig c;
    c.kind = "sandbox";
    c.group = "mailroom";
    c.connections = 2;
    c.Mutable<SandboxSettings>().feedback_url = url;
    c.Mutable<SandboxSettings>().feedback_secret = kSecret;
    c.Mutable<SandboxSettings>().event_delay = absl::Milliseconds(20);
    c.timeout = absl::Seconds(5);
    return c;
  }
  std::unique_ptr<SandboxTransport> Make(const TransportConfig& c) {
    auto t = SandboxTransport::Create(c, RealClock::Get());
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? *std::move(t) : nullptr;
  }
  static OutgoingEmail Job(const std::string& to, uint64_t job) {
    OutgoingEmail e = Email(to, static_cast<int>(job));
    e.content.job_id = job;
    return e;
  }

  int port_ = 0;
  std::vector<std::unique_ptr<Process>> peers_;
};

TEST(SandboxScenarioTest, TheLocalPartAtTheSimulatorDomainPicksTheScenario) {
  const char* d = "sandbox.mailroom.test";
  EXPECT_EQ(SandboxTransport::ScenarioOf("delivered@sandbox.mailroom.test", d),
            Scenario::kDelivered);
  EXPECT_EQ(SandboxTransport::ScenarioOf("bounce@sandbox.mailroom.test", d), Scenario::kBounce);
  EXPECT_EQ(SandboxTransport::ScenarioOf("Bounce@Sandbox.Mailroom.Test", d), Scenario::kBounce);
  EXPECT_EQ(SandboxTransport::ScenarioOf("softbounce@sandbox.mailroom.test", d),
            Scenario::kSoftBounce);
  EXPECT_EQ(SandboxTransport::ScenarioOf("complaint@sandbox.mailroom.test", d),
            Scenario::kComplaint);
  EXPECT_EQ(SandboxTransport::ScenarioOf("delayed@sandbox.mailroom.test", d), Scenario::kDelayed);
  EXPECT_EQ(SandboxTransport::ScenarioOf("suppressed@sandbox.mailroom.test", d),
            Scenario::kSuppressed);
  EXPECT_EQ(SandboxTransport::ScenarioOf("ada@sandbox.mailroom.test", d), Scenario::kDelivered);
  // Outside the simulator domain every address is a delivery, whatever its local part.
  EXPECT_EQ(SandboxTransport::ScenarioOf("bounce@example.com", d), Scenario::kDelivered);
  EXPECT_EQ(SandboxTransport::ScenarioOf("suppressed@sub.sandbox.mailroom.test", d),
            Scenario::kDelivered);
}

TEST_F(SandboxTransportTest, AnswersLikeAProviderAndWritesNothingWithoutADirectory) {
  TransportConfig c = Sandbox("");
  auto t = Make(c);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->Name(), "sandbox");
  EXPECT_EQ(t->Concurrency(), 2);
  auto a = t->Send(Job("delivered@sandbox.mailroom.test", 1));
  auto b = t->Send(Job("ada@example.com", 2));
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE(absl::StartsWith(a->provider_id, "sbx-")) << a->provider_id;
  EXPECT_EQ(a->provider_id.size(), 36u);
  EXPECT_EQ(a->feedback_id, a->provider_id);
  EXPECT_NE(a->provider_id, b->provider_id);

  auto refused = t->Send(Job("suppressed@sandbox.mailroom.test", 3));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(IsRecipientRejected(refused.status())) << refused.status();
  EXPECT_FALSE(IsProviderError(refused.status()));
  EXPECT_THAT(refused.status().message(), HasSubstr("suppression list"));
  EXPECT_TRUE(t->WaitEventsPosted(absl::Seconds(1)));
}

TEST_F(SandboxTransportTest, WritesAcceptedMessagesToItsDirectory) {
  TransportConfig c = Sandbox("");
  c.Mutable<SandboxSettings>().dir = dir_ + "/sandbox/nested";
  auto t = Make(c);
  ASSERT_NE(t, nullptr);
  ASSERT_TRUE(t->Send(Job("bounce@sandbox.mailroom.test", 1)).ok());
  EXPECT_FALSE(t->Send(Job("suppressed@sandbox.mailroom.test", 2)).ok());
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(c.Get<SandboxSettings>().dir)) {
    files.push_back(e.path().string());
  }
  ASSERT_EQ(files.size(), 1u);  // no temporary file left
  EXPECT_TRUE(absl::EndsWith(files[0], ".eml"));
  EXPECT_EQ(Slurp(files[0]), Job("bounce@sandbox.mailroom.test", 1).mime);

  std::ofstream(dir_ + "/blocker") << "x";
  c.Mutable<SandboxSettings>().dir = dir_ + "/blocker/outbox";
  auto blocked = SandboxTransport::Create(c, RealClock::Get());
  EXPECT_EQ(blocked.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StartsWith(blocked.status().message(), "MAILROOM_SANDBOX_DIR: "));
}

TEST_F(SandboxTransportTest, ASecretThatDoesNotParseNamesItsVariable) {
  TransportConfig c = Sandbox("http://127.0.0.1:1/feedback/sandbox");
  c.Mutable<SandboxSettings>().feedback_secret = "";
  auto missing = SandboxTransport::Create(c, RealClock::Get());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(missing.status().message(),
            "MAILROOM_SANDBOX_FEEDBACK_SECRET: required when MAILROOM_TRANSPORT=sandbox (whsec_ "
            "and base64)");
  c.Mutable<SandboxSettings>().feedback_secret = "whsec_dG9vLXNob3J0";
  auto short_key = SandboxTransport::Create(c, RealClock::Get());
  EXPECT_TRUE(absl::StartsWith(short_key.status().message(),
                               "MAILROOM_SANDBOX_FEEDBACK_SECRET: secret 1 must be whsec_"))
      << short_key.status();
}

TEST_F(SandboxTransportTest, EachScenarioPostsItsSignedEventsInOrder) {
  auto t = Make(Sandbox(StartReceiver()));
  ASSERT_NE(t, nullptr);
  auto bounce = t->Send(Job("bounce@sandbox.mailroom.test", 11));
  auto soft = t->Send(Job("softbounce@sandbox.mailroom.test", 12));
  auto complaint = t->Send(Job("complaint@sandbox.mailroom.test", 13));
  auto delayed = t->Send(Job("delayed@sandbox.mailroom.test", 14));
  auto other = t->Send(Job("ada@example.com", 15));
  ASSERT_TRUE(t->Send(Job("suppressed@sandbox.mailroom.test", 16)).status().code() ==
              absl::StatusCode::kInvalidArgument);
  for (const auto* r : {&bounce, &soft, &complaint, &delayed, &other}) ASSERT_TRUE(r->ok());
  ASSERT_TRUE(t->WaitEventsPosted(absl::Seconds(10)));

  nlohmann::json state = State();
  EXPECT_EQ(state["refused"], 0) << state.dump();  // every signature verified
  std::map<std::string, nlohmann::json> by_id;
  std::vector<std::string> order;
  for (const nlohmann::json& m : state["messages"]) {
    by_id[m["id"]] = m["body"].is_string() ? nlohmann::json::parse(m["body"].get<std::string>())
                                           : m["body"];
    order.push_back(m["id"]);
  }
  ASSERT_EQ(by_id.size(), 7u) << state.dump();
  const nlohmann::json& b = by_id["sbx_" + bounce->provider_id + "_bounce"];
  EXPECT_EQ(b,
            (nlohmann::json{{"type", "email.bounced"},
                            {"message_id", bounce->provider_id},
                            {"job_id", "11"},
                            {"group", "mailroom"},
                            {"recipients", {"bounce@sandbox.mailroom.test"}},
                            {"bounce_type", "permanent"},
                            {"reason", "sandbox: 550 5.1.1 mailbox does not exist (simulated)"}}));
  const nlohmann::json& s = by_id["sbx_" + soft->provider_id + "_softbounce"];
  EXPECT_EQ(s["bounce_type"], "transient");
  EXPECT_EQ(s["type"], "email.bounced");
  EXPECT_EQ(by_id["sbx_" + complaint->provider_id + "_delivered"]["type"], "email.delivered");
  EXPECT_EQ(by_id["sbx_" + complaint->provider_id + "_complaint"]["type"], "email.complained");
  EXPECT_EQ(by_id["sbx_" + delayed->provider_id + "_delayed"]["type"], "email.delivery_delayed");
  EXPECT_EQ(by_id["sbx_" + delayed->provider_id + "_delivered"]["type"], "email.delivered");
  EXPECT_EQ(by_id["sbx_" + other->provider_id + "_delivered"]["recipients"],
            nlohmann::json({"ada@example.com"}));
  // An email's events in order.
  auto pos = [&](const std::string& id) {
    return std::find(order.begin(), order.end(), id) - order.begin();
  };
  EXPECT_LT(pos("sbx_" + complaint->provider_id + "_delivered"),
            pos("sbx_" + complaint->provider_id + "_complaint"));
  EXPECT_LT(pos("sbx_" + delayed->provider_id + "_delayed"),
            pos("sbx_" + delayed->provider_id + "_delivered"));
}

TEST_F(SandboxTransportTest, RetriesUnderTheSameIdAfter503AndUnderANewOneAfterUnmatched) {
  auto t = Make(Sandbox(StartReceiver()));
  ASSERT_NE(t, nullptr);
  Script({{{"status", 503}, {"body", "feedback not recorded; retry"}},
          {{"status", 200}, {"body", "unmatched"}},
          {{"status", 200}, {"body", "unmatched"}}});
  auto r = t->Send(Job("bounce@sandbox.mailroom.test", 21));
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(t->WaitEventsPosted(absl::Seconds(20)));
  nlohmann::json state = State();
  const std::string id = "sbx_" + r->provider_id + "_bounce";
  std::vector<std::string> ids;
  for (const nlohmann::json& m : state["messages"]) ids.push_back(m["id"]);
  // The 503 stored nothing; "unmatched" twice (post 2 and 3), then recorded (post 4).
  EXPECT_THAT(ids, ElementsAre(id, id + ".3", id + ".4")) << state.dump();
  EXPECT_EQ(state["requests"], 4) << state.dump();
}

TEST_F(SandboxTransportTest, ARefusalDropsTheEventAndStopDropsWhatIsLeft) {
  const std::string url = StartReceiver();
  SandboxPosterOptions options;
  options.url = url;
  options.keys = {"a-key-the-receiver-does-not-hold-at-all"};
  options.delay = absl::Milliseconds(10);
  {
    SandboxEventPoster poster(options, RealClock::Get());
    poster.Post({"evt_1", R"({"type": "email.delivered"})"});
    ASSERT_TRUE(poster.WaitIdle(absl::Seconds(10)));
    const SandboxEventPoster::Counts n = poster.counts();
    EXPECT_EQ(n.posts, 1);  // 401: not retried
    EXPECT_EQ(n.dropped, 1);
    EXPECT_EQ(n.answered, 0);
  }
  EXPECT_EQ(State()["refused"], 1);

  options.delay = absl::Hours(1);
  SandboxEventPoster later(options, RealClock::Get());
  later.Post({"evt_2", "{}"});
  later.Post({"evt_3", "{}"});
  later.Stop();
  later.Stop();
  EXPECT_EQ(later.counts().dropped, 2);
  EXPECT_EQ(later.counts().posts, 0);
}

}  // namespace
}  // namespace mailroom
