#include "testing/collector_fixture.h"

#include <pqxx/pqxx>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "testing/pg_server.h"

namespace mailroom::testing {

std::map<std::string, std::string> CollectorEnv(const std::string& database_url, int port,
                                                const std::string& key, const std::string& bearer,
                                                const std::map<std::string, std::string>& extra) {
  std::map<std::string, std::string> env = {
      {"MAILROOM_DATABASE_URL", database_url},
      {"MAILROOM_SECRET_KEY", key},
      {"MAILROOM_LISTEN_ADDRESS", absl::StrCat("127.0.0.1:", port)},
      {"MAILROOM_SUBSCRIBER_TOKENS", bearer},
  };
  for (const auto& [k, v] : extra) env[k] = v;
  return env;
}

std::unique_ptr<Process> StartCollectorProcess(const std::map<std::string, std::string>& env,
                                               const std::string& log_path) {
  auto p = Process::Spawn({Runfile("mailroom/collector/collector")}, env, log_path);
  EXPECT_TRUE(p.ok()) << p.status();
  if (!p.ok()) return nullptr;
  EXPECT_TRUE((*p)->WaitForLog("msg=connected", absl::Seconds(20))) << (*p)->Log();
  return *std::move(p);
}

void TestDb::Exec(const std::string& sql) const {
  pqxx::connection c(url_);
  pqxx::work tx(c);
  tx.exec(sql);
  tx.commit();
}

void TestDb::CollectSignups() const {
  pqxx::connection c(url_);
  pqxx::nontransaction tx(c);
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  for (;;) {
    if (tx.exec1("SELECT mailroom_collect_signups(1000)")[0].as<int>() > 0) continue;
    if (!tx.exec1("SELECT EXISTS (SELECT 1 FROM mailroom_signups)")[0].as<bool>()) return;
    if (absl::Now() > deadline) throw std::runtime_error("signups still queued after 60 s");
    absl::SleepFor(absl::Milliseconds(5));  // another collector's turn
  }
}

int64_t TestDb::Scalar(const std::string& sql) const {
  pqxx::connection c(url_);
  pqxx::nontransaction tx(c);
  return tx.exec1(sql)[0].as<int64_t>();
}

std::string TestDb::Text(const std::string& sql) const {
  pqxx::connection c(url_);
  pqxx::nontransaction tx(c);
  return tx.exec1(sql)[0].as<std::string>();
}

void TestDb::InsertAccounts(int n, const std::string& prefix) const {
  Exec(absl::StrCat("INSERT INTO accounts (email, login) SELECT '", prefix,
                    "' || i || '@example.test', '", prefix, "' || i FROM generate_series(1, ", n,
                    ") i"));
}

}  // namespace mailroom::testing
