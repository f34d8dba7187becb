#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "testing/process.h"

namespace mailroom::testing {

// A throwaway pgbouncer (Debian's package, /usr/sbin/pgbouncer) in front of a PostgreSQL on
// 127.0.0.1:`pg_port`: listens on 127.0.0.1 at a free port, `pool_mode` pooling ("statement"
// refuses any transaction that spans more than one query), at most
// `pool_size` server connections per database and user, trust authentication for `postgres`,
// admin console for `postgres` (database `pgbouncer`). Runs as the `postgres` user when the
// test runs as root (pgbouncer refuses root). Destroying the object stops it and deletes its
// directory.
class PgBouncer {
 public:
  static absl::StatusOr<std::unique_ptr<PgBouncer>> Start(
      int pg_port, int pool_size, const std::string& pool_mode = "transaction");
  ~PgBouncer();

  PgBouncer(const PgBouncer&) = delete;
  PgBouncer& operator=(const PgBouncer&) = delete;

  // A libpq URL for `database` through pgbouncer (user postgres, no password).
  std::string Url(const std::string& database) const;
  // Runs a command on the admin console (SHOW, RECONNECT, ...): the rows, one per line, the
  // columns separated by '|'.
  absl::StatusOr<std::string> Admin(const std::string& command) const;

  int port() const { return port_; }
  std::string Log() const { return process_->Log(); }

 private:
  PgBouncer(std::string dir, int port, std::unique_ptr<Process> process)
      : dir_(std::move(dir)), port_(port), process_(std::move(process)) {}

  std::string dir_;
  int port_;
  std::unique_ptr<Process> process_;
};

}  // namespace mailroom::testing
