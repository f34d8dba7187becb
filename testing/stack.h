#pragma once

// A whole mailroom stack for end-to-end tests: a throwaway PostgreSQL with the migrations
// applied, a collector, and helpers to start senders and their peers (SMTP server, SES emulator
// behind its checking front), run SQL, and account for every token and every email delivered.

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "collector/dispatch/signing.h"
#include "gtest/gtest.h"
#include "testing/pg_server.h"
#include "testing/process.h"

namespace mailroom::testing {

inline constexpr char kStackKey[] =
    "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
inline constexpr char kStackBearer[] = "e2e-subscriber-token-0123456789";
inline constexpr char kStackAwsSecret[] = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";

std::string Slurp(const std::string& path);
// The decoded text/plain part of a message built by the sender.
std::string TextPart(const std::string& mime);
// The 86-character token of the first link in `text`, or "".
std::string TokenFromLink(const std::string& text);
// Sorted paths of the files in `dir` whose extension is `ext` (".eml").
std::vector<std::string> Files(const std::string& dir, const std::string& ext);

// What became of every token, from PostgreSQL (group "mailroom").
struct Ledger {
  int64_t tokens = 0;  // sendable when inserted
  int64_t sent = 0;
  int64_t expired = 0;
  int64_t failed = 0;      // failed with a reason
  int64_t cancelled = 0;   // not to be sent (consumed, account status changed), with a reason
  int64_t suppressed = 0;  // superseded, rate limited or address suppressed, with a reason
  int64_t unfinished = 0;  // no delivery, or leased/retry: lost if it stays so
};

// What the peers received: emails, distinct tokens among them, and extra copies.
struct Received {
  int64_t emails = 0;
  int64_t distinct = 0;
  int64_t duplicates() const { return emails - distinct; }
};

class StackTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  // Starts a collector on `port` (0: a fresh one, remembered as the stack's collector port
  // the first time). Waits until it is connected to PostgreSQL.
  std::unique_ptr<Process> StartCollector(const std::map<std::string, std::string>& extra,
                                          const std::string& name, int port = 0);
  // Starts a sender subscribed to `collector_port` (default: the stack's collector); waits
  // until it has subscribed unless `wait` is false.
  std::unique_ptr<Process> StartSender(const std::map<std::string, std::string>& extra,
                                       const std::string& name = "sender", int collector_port = 0,
                                       bool wait = true);
  // An aiosmtpd peer recording into dir_/smtp (extra flags: --fail-first N, --reject-rcpt ...).
  std::unique_ptr<Process> StartSmtpPeer(const std::vector<std::string>& extra, int* port);
  // An aiosmtpd peer on `port` recording into dir_/NAME, its log in dir_/NAME.log (a second
  // provider, or one that comes back on the port it had).
  std::unique_ptr<Process> StartSmtpPeerAt(int port, const std::string& name,
                                           const std::vector<std::string>& extra = {});
  // The SES v2 emulator behind the SigV4-checking front; returns the front's endpoint, or ""
  // when the npm peers are not installed (MAILROOM_NODE_MODULES unset).
  // While `paused_file` (if given) exists the front answers 400 SendingPausedException.
  // `front_args` go to the front as they are (e.g. --sns-dir D --sns-port P: it plays SNS).
  std::string StartSes(int throttle_first, const std::string& paused_file = "",
                       const std::vector<std::string>& front_args = {});
  std::string SesStore();
  // Environment for a sender using the SES transport at `endpoint`.
  std::map<std::string, std::string> SesEnv(const std::string& endpoint);

  void Exec(const std::string& sql);
  int64_t Scalar(const std::string& sql);
  // Waits until `sql` returns `want` (or the timeout), returning the last value.
  int64_t WaitFor(const std::string& sql, int64_t want, absl::Duration timeout);
  // Waits until no token is unfinished (or the timeout); returns the ledger.
  Ledger WaitSettled(absl::Duration timeout);
  Ledger Account();
  // Counts the emails in `dir` (.eml files) and the distinct tokens among them.
  Received ReceivedIn(const std::string& dir);
  // Counts the emails in the SES emulator's store and the distinct tokens among them.
  Received ReceivedBySes();
  void ExpectVerifies(const std::string& mime, TokenAction action, const std::string& code);
  // The grpc.health.v1 status a sender's MAILROOM_HEALTH_ADDRESS on `port` answers (a
  // HealthCheckResponse::ServingStatus), or -1 when it does not answer within 2 s.
  int SenderHealth(int port);
  // Polls SenderHealth(port) until it is `want`; false after `timeout`.
  bool WaitSenderHealth(int port, int want, absl::Duration timeout);
  // The text of one scrape of http://127.0.0.1:PORT/metrics ("" when nothing answers).
  std::string Scrape(int port);

  std::unique_ptr<PgServer> pg_;
  std::string url_, dir_, emulator_;
  int collector_port_ = 0;
  std::unique_ptr<Process> collector_;
  std::vector<std::unique_ptr<Process>> peers_;
  std::map<std::string, std::string> collector_env_;
};

}  // namespace mailroom::testing
