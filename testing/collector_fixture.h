#pragma once

// What every test that runs the collector binary needs, shared by CollectorTest
// (integration_tests/collector_test.cc) and StackTest (stack.h): the collector's environment,
// starting it until it is connected, and SQL against the test database.

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "testing/process.h"

namespace mailroom::testing {

// MAILROOM_* variables for a collector on 127.0.0.1:`port` against `database_url`, signing with
// `key` and accepting `bearer`; `extra` overrides or adds variables.
std::map<std::string, std::string> CollectorEnv(const std::string& database_url, int port,
                                                const std::string& key, const std::string& bearer,
                                                const std::map<std::string, std::string>& extra);

// Starts the collector binary (a data dependency of the test) with `env`, logging to `log_path`
// ("" keeps the log in memory only), and waits until it is connected to PostgreSQL. Null (and
// a test failure) when it cannot be started; a test failure with its log when it does not
// connect within 20 s.
std::unique_ptr<Process> StartCollectorProcess(const std::map<std::string, std::string>& env,
                                               const std::string& log_path = "");

// SQL against a test database, one short connection per call. Throws (failing the test) on SQL
// errors.
class TestDb {
 public:
  explicit TestDb(std::string url) : url_(std::move(url)) {}
  void Exec(const std::string& sql) const;
  int64_t Scalar(const std::string& sql) const;
  std::string Text(const std::string& sql) const;
  // Inserts `n` accounts PREFIXi@example.test / PREFIXi in one statement (one transaction, one
  // folded NOTIFY): each queues its signup, whose activation token a collector makes.
  void InsertAccounts(int n, const std::string& prefix) const;
  // Makes every queued signup's activation token as a collector does (1,000 a call). A running
  // collector may hold the collection's turn meanwhile (a call then takes nothing): waits until
  // nothing is queued. Throws when signups are still queued after 60 s.
  void CollectSignups() const;
  const std::string& url() const { return url_; }

 private:
  std::string url_;
};

}  // namespace mailroom::testing
