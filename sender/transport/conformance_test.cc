// One conformance suite for every transport (smtp, ses, file, http, postmark, sendgrid, mailgun,
// resend), each against its real peer or the stand-in that answers as its provider documents:
// a success with the provider's message id, a permanent rejection of the recipient, a
// temporary failure, throttling, an answer lost after the request left, and 10,000 jobs with a
// random mix of those faults, driven as the engine drives a transport. The peers choose each
// fault by the recipient's local part ("reject-17@...") on the job's first try only, so the
// outcome of every job is known in advance and asserted exactly.
#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "sender/transport/file_transport.h"
#include "sender/transport/http_transport.h"
#include "sender/transport/provider_transport.h"
#include "sender/transport/testing/transport_peers.h"
#include "sender/transport/transport_factory.h"

namespace mailroom {
namespace {

namespace fs = std::filesystem;
using ::mailroom::testing::FreePort;
using ::mailroom::testing::Process;
using ::mailroom::testing::Runfile;
using transport_testing::Slurp;
using transport_testing::TransportTest;

constexpr char kApiKey[] = "k3y-for-the-stand-in";
constexpr char kWebhookSecret[] = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

enum class Fault { kOk, kReject, kError, kThrottle, kLost, kDrop };
const char* Prefix(Fault f) {
  switch (f) {
    case Fault::kOk: return "ok";
    case Fault::kReject: return "reject";
    case Fault::kError: return "error";
    case Fault::kThrottle: return "throttle";
    case Fault::kLost: return "lost";
    case Fault::kDrop: return "drop";
  }
  return "";
}

// What the engine makes of one send (Engine::Deliver): SENT, FAILED, or tried again (RETRY:
// a failure a retry may fix, a provider error that holds the job, or the one retry of a send
// that may have reached the provider).
enum class Outcome { kSent, kFailed, kRetry };
Outcome Classify(const absl::StatusOr<SendResult>& r, int failures_before) {
  if (r.ok()) return Outcome::kSent;
  if (IsMaybeSent(r.status())) return failures_before == 0 ? Outcome::kRetry : Outcome::kSent;
  if (r.status().code() == absl::StatusCode::kUnavailable) return Outcome::kRetry;
  return Outcome::kFailed;
}

std::string Recipient(Fault f, uint64_t job) {
  return absl::StrCat(Prefix(f), "-", job, "@example.test");
}

// An email as the renderer and the engine make it for `job` (tags included).
OutgoingEmail Job(uint64_t job, Fault fault) {
  const std::string to = Recipient(fault, job);
  OutgoingEmail e{"no-reply@example.test", to,
                  absl::StrCat("From: Example <no-reply@example.test>\r\nTo: <", to,
                               ">\r\nSubject: Activate\r\nMessage-ID: <job", job,
                               "@example.test>\r\n\r\nhello ", job, "\r\n"),
                  absl::StrCat("job", job, "@example.test")};
  e.tags = {{"mailroom_job", absl::StrCat(job)}, {"mailroom_action", "activation"}};
  e.content = {job,
               "activation",
               1,
               "Example <no-reply@example.test>",
               "Activate your account",
               absl::StrCat("Your code is ", job),
               absl::StrCat("<p>Your code is ", job, "</p>"),
               "",
               absl::InfinitePast()};
  return e;
}

// What a transport's peer says of its first-try faults.
struct Expect {
  bool rejection_suppresses = true;  // the rejection is RecipientRejected
  bool error_holds = true;           // a temporary failure is a provider error (breaker)
  bool throttle_holds = true;        // throttling is a provider error (breaker)
  bool retry_is_idempotent = false;  // the retry after a lost answer is not delivered again
  bool faults = true;                // the peer can inject faults at all
  bool message_id = true;            // an accepted email has the provider's message id
  bool throttle_waits = false;       // the throttling answer says how long to wait
};

class ConformanceTest : public TransportTest, public ::testing::WithParamInterface<std::string> {
 protected:
  std::string kind() const { return GetParam(); }

  Expect Expected() const {
    Expect e;
    const std::string k = kind();
    if (k == "smtp") e.error_holds = false;  // 451 on RCPT: this message, later
    if (k == "ses") {
      e.rejection_suppresses = false;  // MessageRejected says nothing of the address
      e.throttle_holds = false;        // SES throttling paces this message only
    }
    if (k == "file") e.faults = false;
    if (k == "resend") e.retry_is_idempotent = true;       // Idempotency-Key
    if (k == "smtp" || k == "file") e.message_id = false;  // reply text / file path instead
    if (k == "postmark" || k == "sendgrid" || k == "mailgun" || k == "resend") {
      e.throttle_waits = true;
    }
    return e;
  }

  // Starts the transport's peer; returns the transport's configuration.
  TransportConfig StartPeer(int connections) {
    TransportConfig c;
    const std::string k = kind();
    if (k == "smtp") {
      // Pipelined, as real servers offer it; smtp_transport_test covers one command at a time.
      c = Smtp(absl::StrCat("smtp://127.0.0.1:",
                            StartSmtp({"--faults-by-recipient", "--pipelining"})),
               false);
    } else if (k == "ses") {
      front_ = StartSes(0, false, {"--faults-by-recipient"});
      c = Ses(front_);
    } else if (k == "file") {
      c.kind = "file";
      c.Mutable<FileSettings>().dir = dir_ + "/outbox";
    } else if (k == "http") {
      c.kind = "http";
      c.Mutable<HttpSettings>().url = Serve("webhook_receiver.py",
                                            {"serve", "--secret", kWebhookSecret,
                                             "--faults-by-recipient"}) +
                                      "/hooks/mail";
      c.Mutable<HttpSettings>().secret = kWebhookSecret;
    } else {
      c.kind = k;
      c.Mutable<ProviderSettings>().api_url = Serve("provider_standin.py",
                                                    {"--provider", k, "--key", kApiKey, "--domain",
                                                     "mg.example.test"});
      c.Mutable<ProviderSettings>().api_key = kApiKey;
      c.Mutable<ProviderSettings>().mailgun_domain = "mg.example.test";
    }
    c.group = "mailroom";
    c.connections = connections;
    c.timeout = absl::Seconds(10);
    return c;
  }

  // Starts the peer `script` of testing/ with `args` and --port; returns its base URL.
  std::string Serve(const std::string& script, const std::vector<std::string>& args) {
    port_ = FreePort();
    std::vector<std::string> argv = {
        "/usr/bin/python3", Runfile(absl::StrCat("mailroom/sender/transport/testing/", script))};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.insert(argv.end(), {"--port", absl::StrCat(port_)});
    auto p = Process::Spawn(argv, {}, dir_ + "/peer.log");
    EXPECT_TRUE(p.ok());
    EXPECT_TRUE((*p)->WaitForLog("ready", absl::Seconds(20))) << (*p)->Log();
    peers_.push_back(*std::move(p));
    return absl::StrCat("http://127.0.0.1:", port_);
  }

  nlohmann::json GetJson(const std::string& url) {
    const std::string out = dir_ + "/answer.json";
    std::system(absl::StrCat("curl -s ", url, " > ", out).c_str());
    return nlohmann::json::parse(Slurp(out), nullptr, false);
  }

  // How many times the peer received each recipient's message and accepted it.
  std::map<std::string, int> Deliveries() {
    std::map<std::string, int> out;
    const std::string k = kind();
    if (k == "smtp" || k == "file") {
      const std::string dir = dir_ + (k == "smtp" ? "/smtp" : "/outbox");
      for (const auto& e : fs::directory_iterator(dir)) {
        if (e.path().extension() != ".eml") continue;
        const std::string mime = Slurp(e.path().string());
        const size_t to = mime.find("To: <");
        if (to != std::string::npos) ++out[mime.substr(to + 5, mime.find('>', to) - to - 5)];
      }
      return out;
    }
    nlohmann::json d = k == "ses" ? GetJson(absl::StrCat(front_, "/_front/stats"))["delivered_to"]
                                  : GetJson(absl::StrCat("http://127.0.0.1:", port_,
                                                         "/_control/state"))["deliveries"];
    for (const auto& [key, n] : d.items()) out[key] = n.get<int>();
    return out;
  }

  // How many send requests the peer received for each job's email (refused, dropped or not),
  // by DeliveryKey; and the peer's record of the connections it dropped (`drops`).
  std::map<std::string, int> Received(nlohmann::json* drops) {
    nlohmann::json state = kind() == "ses" ? GetJson(absl::StrCat(front_, "/_front/stats"))
                                           : GetJson(absl::StrCat("http://127.0.0.1:", port_,
                                                                  "/_control/state"));
    std::map<std::string, int> out;
    for (const auto& [key, n] : state[kind() == "ses" ? "tries" : "received"].items()) {
      out[key] = n.get<int>();
    }
    *drops = state["drops"];
    return out;
  }

  std::unique_ptr<Transport> Make(const TransportConfig& c) {
    auto t = MakeTransport(c);
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? *std::move(t) : nullptr;
  }

  // The key a peer counts deliveries by: the recipient, or for http/providers the job.
  std::string DeliveryKey(uint64_t job, Fault f) const {
    const std::string k = kind();
    if (k == "http") return absl::StrCat("msg_mailroom_", job);
    if (k == "smtp" || k == "file" || k == "ses") return Recipient(f, job);
    return absl::StrCat(job);
  }

  int port_ = 0;
  std::string front_;
};

TEST_P(ConformanceTest, AnAcceptedEmailIsSentWithTheProvidersMessageId) {
  auto t = Make(StartPeer(2));
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->Name(), kind());
  auto r = t->Send(Job(1, Fault::kOk));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->provider_id.empty());
  if (Expected().message_id) {
    EXPECT_EQ(r->feedback_id, r->provider_id);
  }
  EXPECT_EQ(Deliveries()[DeliveryKey(1, Fault::kOk)], 1);
}

TEST_P(ConformanceTest, APermanentRejectionFailsTheJobWithTheProvidersReason) {
  if (!Expected().faults) GTEST_SKIP() << kind() << " has no peer to refuse anything";
  auto t = Make(StartPeer(2));
  auto r = t->Send(Job(2, Fault::kReject));
  EXPECT_EQ(Classify(r, 0), Outcome::kFailed) << r.status();
  EXPECT_EQ(IsRecipientRejected(r.status()), Expected().rejection_suppresses) << r.status();
  EXPECT_FALSE(IsMaybeSent(r.status()));
  EXPECT_FALSE(r.status().message().empty());
  EXPECT_FALSE(absl::StrContains(r.status().message(), kApiKey));
  EXPECT_EQ(Deliveries()[DeliveryKey(2, Fault::kReject)], 0);
}

TEST_P(ConformanceTest, ATemporaryFailureIsRetriedAndDeliveredOnce) {
  if (!Expected().faults) GTEST_SKIP() << kind() << " has no peer to fail";
  auto t = Make(StartPeer(2));
  auto r = t->Send(Job(3, Fault::kError));
  EXPECT_EQ(Classify(r, 0), Outcome::kRetry) << r.status();
  EXPECT_EQ(IsProviderError(r.status()), Expected().error_holds) << r.status();
  EXPECT_FALSE(IsMaybeSent(r.status()));
  auto again = t->Send(Job(3, Fault::kError));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(Deliveries()[DeliveryKey(3, Fault::kError)], 1);
}

TEST_P(ConformanceTest, ThrottlingIsRetriedAndDeliveredOnce) {
  if (!Expected().faults) GTEST_SKIP() << kind() << " has no peer to throttle";
  auto t = Make(StartPeer(2));
  auto r = t->Send(Job(4, Fault::kThrottle));
  EXPECT_EQ(Classify(r, 0), Outcome::kRetry) << r.status();
  EXPECT_EQ(IsProviderError(r.status()), Expected().throttle_holds) << r.status();
  EXPECT_FALSE(IsMaybeSent(r.status()));
  // The provider's wait travels with the status (Retry-After: 1; SendGrid's X-RateLimit-Reset
  // 2 s on, in whole seconds): the breaker and the retry wait that long.
  const std::optional<absl::Duration> wait = ProviderRetryAfter(r.status());
  if (Expected().throttle_waits) {
    ASSERT_TRUE(wait.has_value()) << r.status();
    if (kind() == "sendgrid") {
      EXPECT_GT(*wait, absl::ZeroDuration());
      EXPECT_LE(*wait, absl::Seconds(2));
    } else {
      EXPECT_EQ(*wait, absl::Seconds(1));
    }
  } else {
    EXPECT_EQ(wait, std::nullopt);
  }
  ASSERT_TRUE(t->Send(Job(4, Fault::kThrottle)).ok());
  EXPECT_EQ(Deliveries()[DeliveryKey(4, Fault::kThrottle)], 1);
}

TEST_P(ConformanceTest, ALostAnswerIsChargedRetriedOnceAndDuplicatedAtMostOnce) {
  if (!Expected().faults) GTEST_SKIP() << kind() << " has no peer to lose an answer";
  auto t = Make(StartPeer(2));
  auto r = t->Send(Job(5, Fault::kLost));
  EXPECT_TRUE(IsMaybeSent(r.status())) << r.status();
  EXPECT_EQ(Classify(r, 0), Outcome::kRetry);
  OutgoingEmail retry = Job(5, Fault::kLost);
  retry.content.attempt = 2;
  auto again = t->Send(retry);
  ASSERT_TRUE(again.ok()) << again.status();
  if (Expected().message_id) {
    EXPECT_FALSE(again->feedback_id.empty());
  }
  EXPECT_EQ(Deliveries()[DeliveryKey(5, Fault::kLost)], Expected().retry_is_idempotent ? 1 : 2);
}

// The provider reads a whole request on a kept-alive connection, acts on it, and closes the
// connection without a byte of answer. libcurl sends a request again by itself in that case
// when it can rewind the body; the transports' bodies refuse (CurlBody), so the send is
// ambiguous (MaybeSent, charged) and the engine's own single retry is the only second copy:
// the provider receives the email exactly twice, never three times, and the job ends SENT
// after two tries.
TEST_P(ConformanceTest, AKeptAliveConnectionClosedUnansweredIsRetriedByMailroomAlone) {
  const std::string k = kind();
  if (k == "smtp" || k == "file" || k == "http") {
    GTEST_SKIP() << k << ": not an HTTP API with a connection-dropping peer";
  }
  auto t = Make(StartPeer(1));  // one connection: the second email rides the first's
  ASSERT_NE(t, nullptr);
  ASSERT_TRUE(t->Send(Job(60, Fault::kOk)).ok());
  OutgoingEmail email = Job(61, Fault::kDrop);
  std::vector<absl::Status> results;
  Outcome outcome = Outcome::kRetry;
  for (int failures = 0; outcome == Outcome::kRetry && results.size() < 5; ++failures) {
    email.content.attempt = failures + 1;
    auto r = t->Send(email);
    results.push_back(r.status());
    outcome = Classify(r, failures);
  }
  ASSERT_FALSE(results.empty());
  EXPECT_TRUE(IsMaybeSent(results[0])) << results[0];
  EXPECT_FALSE(IsProviderError(results[0])) << results[0];
  EXPECT_EQ(outcome, Outcome::kSent);
  EXPECT_EQ(results.size(), 2u);  // the lost try and mailroom's one retry
  nlohmann::json drops;
  std::map<std::string, int> received = Received(&drops);
  EXPECT_EQ(received[DeliveryKey(61, Fault::kDrop)], 2);
  // Every copy the provider received is a try mailroom counted (and charged).
  EXPECT_EQ(received[DeliveryKey(61, Fault::kDrop)], static_cast<int>(results.size()));
  EXPECT_EQ(received[DeliveryKey(60, Fault::kOk)], 1);
  ASSERT_EQ(drops.size(), 1u) << drops.dump();
  EXPECT_EQ(drops[0]["on_connection"], 2) << drops.dump();  // on the kept-alive connection
  EXPECT_EQ(Deliveries()[DeliveryKey(61, Fault::kDrop)], Expected().retry_is_idempotent ? 1 : 2);
}

// 10,000 jobs, each with a fault drawn at random (60 % none, 10 % each of rejection,
// temporary failure, throttling and lost answer), sent by 16 threads over 16 connections and
// tried again as the engine would until each ends: every job ends exactly once, as SENT or
// FAILED as its fault says, after exactly the tries it says, and reaches the provider at most
// twice (once more only after a lost answer).
TEST_P(ConformanceTest, TenThousandJobsWithInjectedFaultsEndExactlyOnce) {
  constexpr int kJobs = 10000;
  constexpr int kThreads = 16;
  const Expect expect = Expected();
  auto t = Make(StartPeer(kThreads));
  ASSERT_NE(t, nullptr);
  std::mt19937 rng(20261127);
  std::vector<Fault> fault(kJobs + 1, Fault::kOk);
  for (int j = 1; j <= kJobs && expect.faults; ++j) {
    const int roll = static_cast<int>(rng() % 100);
    fault[j] = roll < 60   ? Fault::kOk
               : roll < 70 ? Fault::kReject
               : roll < 80 ? Fault::kError
               : roll < 90 ? Fault::kThrottle
                           : Fault::kLost;
  }
  absl::Mutex mu;
  std::deque<uint64_t> queue;
  std::vector<int> failures(kJobs + 1, 0), tries(kJobs + 1, 0);
  std::map<uint64_t, Outcome> ended;
  int ended_twice = 0, sent_without_id = 0;
  for (uint64_t j = 1; j <= kJobs; ++j) queue.push_back(j);
  auto work = [&] {
    for (;;) {
      uint64_t job;
      int failed_before;
      {
        absl::MutexLock lock(&mu);
        if (queue.empty()) return;
        job = queue.front();
        queue.pop_front();
        failed_before = failures[job];
      }
      OutgoingEmail email = Job(job, fault[job]);
      email.content.attempt = failed_before + 1;
      auto r = t->Send(email);
      const Outcome o = Classify(r, failed_before);
      absl::MutexLock lock(&mu);
      ++tries[job];
      if (o == Outcome::kRetry && tries[job] < 5) {
        ++failures[job];
        queue.push_back(job);
        continue;
      }
      if (!ended.emplace(job, o).second) ++ended_twice;
      if (o == Outcome::kSent && expect.message_id && (!r.ok() || r->feedback_id.empty())) {
        ++sent_without_id;
      }
    }
  };
  const absl::Time start = absl::Now();
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int i = 0; i < kThreads; ++i) threads.emplace_back(work);
  for (auto& th : threads) th.join();
  const absl::Duration took = absl::Now() - start;
  std::cout << kind() << ": " << kJobs << " jobs in " << absl::FormatDuration(took) << "\n";

  ASSERT_EQ(ended.size(), static_cast<size_t>(kJobs));
  EXPECT_EQ(ended_twice, 0);
  EXPECT_EQ(sent_without_id, 0);
  const std::map<std::string, int> delivered = Deliveries();
  int wrong_outcome = 0, wrong_tries = 0, wrong_deliveries = 0, over_one_duplicate = 0;
  for (uint64_t j = 1; j <= kJobs; ++j) {
    const Fault f = fault[j];
    const Outcome want = f == Fault::kReject ? Outcome::kFailed : Outcome::kSent;
    const int want_tries = f == Fault::kOk || f == Fault::kReject ? 1 : 2;
    const int want_deliveries = f == Fault::kReject                                ? 0
                                : f == Fault::kLost && !expect.retry_is_idempotent ? 2
                                                                                   : 1;
    auto it = delivered.find(DeliveryKey(j, f));
    const int n = it == delivered.end() ? 0 : it->second;
    wrong_outcome += ended[j] != want;
    wrong_tries += tries[j] != want_tries;
    wrong_deliveries += n != want_deliveries;
    over_one_duplicate += n > 2;
  }
  EXPECT_EQ(wrong_outcome, 0);
  EXPECT_EQ(wrong_tries, 0);
  EXPECT_EQ(wrong_deliveries, 0);
  EXPECT_EQ(over_one_duplicate, 0);
}

INSTANTIATE_TEST_SUITE_P(EveryTransport, ConformanceTest,
                         ::testing::Values("smtp", "ses", "file", "http", "postmark", "sendgrid",
                                           "mailgun", "resend"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace mailroom
