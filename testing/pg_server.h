#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace mailroom::testing {

// A throwaway PostgreSQL 15 cluster for tests: initdb in a fresh temp directory, TCP on
// 127.0.0.1 at a free port, unix socket inside the temp directory, fsync off (unless durable:
// then fsync, synchronous_commit and full_page_writes keep their defaults). Runs the server
// as the `postgres` user when the test runs as root (PostgreSQL refuses root). Destroying the
// object stops the server and deletes the directory; if the process dies without destroying
// it (a test timeout, Ctrl-C on a benchmark, a crash), a watchdog does the same within about a
// second. Not thread-safe.
class PgServer {
 public:
  // Creates and starts a cluster. Fails if the PostgreSQL binaries are missing. `durable`
  // (benchmarks) keeps PostgreSQL's default fsync = on and synchronous_commit = on.
  static absl::StatusOr<std::unique_ptr<PgServer>> Start(bool durable = false);
  ~PgServer();

  PgServer(const PgServer&) = delete;
  PgServer& operator=(const PgServer&) = delete;

  // A libpq URL for `database` on this server (user postgres, no password).
  std::string Url(const std::string& database = "postgres") const;

  // Creates an empty database and returns its URL.
  absl::StatusOr<std::string> CreateDatabase(const std::string& name);

  // Stops the server (fast shutdown; connections are dropped) keeping its data.
  absl::Status Stop();
  // Stops the server as a crash would (immediate shutdown: no checkpoint, so the next start
  // runs crash recovery and empties every unlogged table), keeping its data.
  absl::Status Crash();
  // Starts it again on the same port.
  absl::Status Resume();
  // Runs SQL through psql against `database`; returns psql's output (tuples only, unaligned).
  absl::StatusOr<std::string> Psql(const std::string& database, const std::string& sql);

  int port() const { return port_; }
  // The cluster's temp directory (data, socket and log).
  const std::string& dir() const { return dir_; }

 private:
  PgServer(std::string dir, int port, bool durable)
      : dir_(std::move(dir)), port_(port), durable_(durable) {}
  absl::Status StartServer();
  absl::Status Shutdown(const char* mode);  // pg_ctl stop -m `mode`
  absl::Status StartWatchdog();

  std::string dir_;
  int port_;
  bool durable_;
  bool running_ = false;
};

// A free TCP port on 127.0.0.1 (bound and released; a race with other processes is possible
// but unlikely).
int FreePort();

// Waits until something accepts TCP connections on 127.0.0.1:`port`; false on timeout.
bool WaitForListener(int port, absl::Duration timeout);

// The absolute path of a file in the runfiles tree (Bazel data dependency), e.g.
// "mailroom/collector/collector".
std::string Runfile(const std::string& path);

}  // namespace mailroom::testing
