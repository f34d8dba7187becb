#include "testing/stack.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <pqxx/pqxx>
#include <regex>
#include <set>
#include <sstream>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "collector/schema/migrate.h"
#include "grpcpp/grpcpp.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "testing/collector_fixture.h"

namespace mailroom::testing {

namespace fs = std::filesystem;

std::string Slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string TextPart(const std::string& mime) {
  size_t start = mime.find("Content-Type: text/plain");
  if (start == std::string::npos) return "";
  start = mime.find("\r\n\r\n", start);
  if (start == std::string::npos) return "";
  size_t end = mime.find("--=_mailroom_", start);
  std::string b64 = mime.substr(start + 4, end == std::string::npos ? end : end - start - 4);
  b64.erase(std::remove(b64.begin(), b64.end(), '\r'), b64.end());
  b64.erase(std::remove(b64.begin(), b64.end(), '\n'), b64.end());
  std::string text;
  absl::Base64Unescape(b64, &text);
  return text;
}

std::string TokenFromLink(const std::string& text) {
  std::smatch m;
  static const std::regex re("\\?token=([A-Za-z0-9_-]{86})");
  return std::regex_search(text, m, re) ? m[1].str() : "";
}

std::vector<std::string> Files(const std::string& dir, const std::string& ext) {
  std::vector<std::string> out;
  if (!fs::exists(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ext) out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

void StackTest::SetUp() {
  auto pg = PgServer::Start();
  ASSERT_TRUE(pg.ok()) << pg.status();
  pg_ = *std::move(pg);
  url_ = pg_->Url();
  ASSERT_TRUE(MigrateUp(url_, EmbeddedMigrations()).ok());
  dir_ = absl::StrCat(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp", "/stack-",
                      ::testing::UnitTest::GetInstance()->current_test_info()->name());
  fs::remove_all(dir_);
  fs::create_directories(dir_);
  collector_ = StartCollector({}, "collector");
  ASSERT_NE(collector_, nullptr);
}

void StackTest::TearDown() {
  // Processes first (their destructors kill and reap), then the database.
  peers_.clear();
  collector_.reset();
  pg_.reset();
}

std::unique_ptr<Process> StackTest::StartCollector(const std::map<std::string, std::string>& extra,
                                                   const std::string& name, int port) {
  if (port == 0) port = FreePort();
  if (collector_port_ == 0) collector_port_ = port;
  std::map<std::string, std::string> defaults = {
      {"MAILROOM_METRICS_ADDRESS", "off"},        {"MAILROOM_BATCH_TIMEOUT", "0"},
      {"MAILROOM_POLL_INTERVAL", "300"},          {"MAILROOM_LEASE_MS", "3000"},
      {"MAILROOM_RECONNECT_MAX_BACKOFF", "1000"},
  };
  for (auto& [k, v] : extra) defaults[k] = v;
  return StartCollectorProcess(CollectorEnv(url_, port, kStackKey, kStackBearer, defaults),
                               absl::StrCat(dir_, "/", name, ".log"));
}

std::unique_ptr<Process> StackTest::StartSender(const std::map<std::string, std::string>& extra,
                                                const std::string& name, int collector_port,
                                                bool wait) {
  std::map<std::string, std::string> env = {
      {"MAILROOM_COLLECTOR_ADDRESS",
       absl::StrCat("127.0.0.1:", collector_port ? collector_port : collector_port_)},
      {"MAILROOM_COLLECTOR_TOKEN", kStackBearer},
      {"MAILROOM_FROM", "Example <no-reply@example.test>"},
      {"MAILROOM_LINK_BASE_URL", "https://app.example.test/"},
      {"MAILROOM_METRICS_ADDRESS", "off"},
      {"MAILROOM_HEALTH_ADDRESS", "off"},
      {"MAILROOM_EXPIRY_MARGIN_MS", "1000"},
      {"MAILROOM_RETRY_BASE_MS", "100"},
      {"MAILROOM_RETRY_MAX_MS", "400"},
      {"MAILROOM_SENDER_NAME", name},
  };
  for (auto& [k, v] : extra) env[k] = v;
  auto p = Process::Spawn({Runfile("mailroom/sender/sender")}, env,
                          absl::StrCat(dir_, "/", name, ".log"));
  EXPECT_TRUE(p.ok());
  if (!p.ok()) return nullptr;
  if (wait) {
    EXPECT_TRUE((*p)->WaitForLog("msg=subscribed", absl::Seconds(20))) << (*p)->Log();
  }
  return *std::move(p);
}

std::unique_ptr<Process> StackTest::StartSmtpPeer(const std::vector<std::string>& extra,
                                                  int* port) {
  *port = FreePort();
  return StartSmtpPeerAt(*port, "smtp", extra);
}

std::unique_ptr<Process> StackTest::StartSmtpPeerAt(int port, const std::string& name,
                                                    const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {"/usr/bin/python3",
                                   Runfile("mailroom/sender/transport/testing/smtp_peer.py"),
                                   "--port",
                                   absl::StrCat(port),
                                   "--dir",
                                   dir_ + "/" + name};
  argv.insert(argv.end(), extra.begin(), extra.end());
  auto p = Process::Spawn(argv, {}, dir_ + "/" + name + ".log");
  EXPECT_TRUE(p.ok());
  if (!p.ok()) return nullptr;
  // "ready PORT" (a bare "ready" would match "address already in use").
  EXPECT_TRUE((*p)->WaitForLog(absl::StrCat("ready ", port), absl::Seconds(20))) << (*p)->Log();
  return *std::move(p);
}

std::string StackTest::StartSes(int throttle_first, const std::string& paused_file,
                                const std::vector<std::string>& front_args) {
  const char* modules = std::getenv("MAILROOM_NODE_MODULES");
  if (modules == nullptr || *modules == '\0') return "";
  int emu = FreePort();
  auto e = Process::Spawn({"node", absl::StrCat(modules, "/aws-ses-v2-local/dist/cli.js"), "--host",
                           "127.0.0.1", "--port", absl::StrCat(emu)},
                          {}, dir_ + "/ses.log");
  EXPECT_TRUE(e.ok());
  if (!e.ok()) return "";
  EXPECT_TRUE((*e)->WaitForLog("server running", absl::Seconds(30))) << (*e)->Log();
  peers_.push_back(*std::move(e));
  emulator_ = absl::StrCat("http://127.0.0.1:", emu);
  int front = FreePort();
  std::vector<std::string> argv = {
      "/usr/bin/python3", Runfile("mailroom/sender/transport/testing/ses_front.py"),
      "--port",           absl::StrCat(front),
      "--upstream",       emulator_,
      "--access-key",     "AKIDEXAMPLE",
      "--secret-key",     kStackAwsSecret,
      "--throttle-first", absl::StrCat(throttle_first)};
  if (!paused_file.empty()) {
    argv.push_back("--paused-file");
    argv.push_back(paused_file);
  }
  argv.insert(argv.end(), front_args.begin(), front_args.end());
  auto f = Process::Spawn(argv, {}, dir_ + "/front.log");
  EXPECT_TRUE(f.ok());
  if (!f.ok()) return "";
  EXPECT_TRUE((*f)->WaitForLog("ready", absl::Seconds(20))) << (*f)->Log();
  peers_.push_back(*std::move(f));
  return absl::StrCat("http://127.0.0.1:", front);
}

std::string StackTest::SesStore() {
  std::string out = dir_ + "/store.json";
  std::system(absl::StrCat("curl -s ", emulator_, "/store > ", out).c_str());
  return Slurp(out);
}

std::map<std::string, std::string> StackTest::SesEnv(const std::string& endpoint) {
  return {{"MAILROOM_TRANSPORT", "ses"},
          {"MAILROOM_SES_ENDPOINT", endpoint},
          {"MAILROOM_SES_REGION", "us-east-1"},
          {"AWS_ACCESS_KEY_ID", "AKIDEXAMPLE"},
          {"AWS_SECRET_ACCESS_KEY", kStackAwsSecret}};
}

void StackTest::Exec(const std::string& sql) { TestDb(url_).Exec(sql); }

int64_t StackTest::Scalar(const std::string& sql) { return TestDb(url_).Scalar(sql); }

int64_t StackTest::WaitFor(const std::string& sql, int64_t want, absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  int64_t v = Scalar(sql);
  while (v != want && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(100));
    v = Scalar(sql);
  }
  return v;
}

Ledger StackTest::Account() {
  pqxx::connection c(url_);
  pqxx::nontransaction tx(c);
  auto r = tx.exec1(
      "SELECT count(*),"
      "       count(*) FILTER (WHERE d.state = 'sent'),"
      "       count(*) FILTER (WHERE d.state = 'expired'),"
      "       count(*) FILTER (WHERE d.state = 'failed' AND d.reason <> ''),"
      "       count(*) FILTER (WHERE d.state = 'cancelled' AND d.reason <> ''),"
      "       count(*) FILTER (WHERE d.state IN ('superseded', 'rate_limited', 'suppressed')"
      "                          AND d.reason <> ''),"
      "       count(*) FILTER (WHERE d.state IS NULL"
      "                          OR d.state NOT IN ('sent', 'expired', 'failed', 'cancelled',"
      "                                             'superseded', 'rate_limited', 'suppressed')"
      "                          OR (d.state IN ('failed', 'cancelled', 'superseded',"
      "                                          'rate_limited', 'suppressed')"
      "                              AND coalesce(d.reason, '') = ''))"
      "  FROM tokens t"
      "  LEFT JOIN delivery_states d ON d.token_id = t.id"
      "   AND d.group_id = (SELECT id FROM consumer_groups WHERE name = 'mailroom')");
  return Ledger{r[0].as<int64_t>(), r[1].as<int64_t>(), r[2].as<int64_t>(), r[3].as<int64_t>(),
                r[4].as<int64_t>(), r[5].as<int64_t>(), r[6].as<int64_t>()};
}

Ledger StackTest::WaitSettled(absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  Ledger l = Account();
  while (l.unfinished != 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(200));
    l = Account();
  }
  return l;
}

Received StackTest::ReceivedIn(const std::string& dir) {
  Received r;
  std::set<std::string> tokens;
  for (const auto& path : Files(dir, ".eml")) {
    ++r.emails;
    tokens.insert(TokenFromLink(TextPart(Slurp(path))));
  }
  r.distinct = static_cast<int64_t>(tokens.size());
  return r;
}

Received StackTest::ReceivedBySes() {
  // The store is JSON: {"emails":[{"messageId":...,"body":{"text":...,"html":...}}, ...]}.
  // Each email's first link (in its text part) carries its token.
  Received r;
  std::string store = SesStore();
  std::set<std::string> tokens;
  static const std::regex re("token=([A-Za-z0-9_-]{86})");
  const std::string marker = "\"messageId\"";
  for (size_t at = store.find(marker); at != std::string::npos;) {
    size_t next = store.find(marker, at + marker.size());
    std::string one = store.substr(at, next == std::string::npos ? next : next - at);
    ++r.emails;
    std::smatch m;
    if (std::regex_search(one, m, re)) tokens.insert(m[1].str());
    at = next;
  }
  r.distinct = static_cast<int64_t>(tokens.size());
  return r;
}

void StackTest::ExpectVerifies(const std::string& mime, TokenAction action,
                               const std::string& code) {
  std::string token = TokenFromLink(TextPart(mime));
  ASSERT_EQ(token.size(), 86u) << TextPart(mime);
  std::vector<SigningKey> keys = {*ParseSigningKey(kStackKey)};
  EXPECT_TRUE(VerifyToken(keys, action, token, code).ok());
}

int StackTest::SenderHealth(int port) {
  auto stub = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  grpc::health::v1::HealthCheckRequest req;
  grpc::health::v1::HealthCheckResponse resp;
  return stub->Check(&ctx, req, &resp).ok() ? resp.status() : -1;
}

bool StackTest::WaitSenderHealth(int port, int want, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (SenderHealth(port) != want) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return true;
}

std::string StackTest::Scrape(int port) {
  const std::string out = dir_ + "/metrics.txt";
  std::system(absl::StrCat("curl -s http://127.0.0.1:", port, "/metrics > ", out).c_str());
  return Slurp(out);
}

}  // namespace mailroom::testing
