#include "testing/pgbouncer.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "testing/pg_server.h"

namespace mailroom::testing {
namespace {

constexpr char kPgBouncer[] = "/usr/sbin/pgbouncer";

}  // namespace

absl::StatusOr<std::unique_ptr<PgBouncer>> PgBouncer::Start(int pg_port, int pool_size,
                                                            const std::string& pool_mode) {
  if (!std::filesystem::exists(kPgBouncer)) {
    return absl::FailedPreconditionError("pgbouncer is not installed (apt-get install pgbouncer)");
  }
  char tmpl[] = "/tmp/mailroom-pgbouncer.XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return absl::InternalError("mkdtemp failed");
  const std::string dir = tmpl;
  const int port = FreePort();
  {
    std::ofstream users(dir + "/users.txt");
    users << "\"postgres\" \"\"\n";
    std::ofstream ini(dir + "/pgbouncer.ini");
    ini << "[databases]\n"
        << "* = host=127.0.0.1 port=" << pg_port << "\n"
        << "[pgbouncer]\n"
        << "listen_addr = 127.0.0.1\n"
        << "listen_port = " << port << "\n"
        << "unix_socket_dir =\n"
        << "auth_type = trust\n"
        << "auth_file = " << dir << "/users.txt\n"
        << "admin_users = postgres\n"
        << "pool_mode = " << pool_mode << "\n"
        << "default_pool_size = " << pool_size << "\n"
        << "min_pool_size = 0\n"
        << "reserve_pool_size = 0\n"
        << "max_client_conn = 200\n"
        << "server_reset_query =\n"
        << "logfile = " << dir << "/pgbouncer.log\n"
        << "pidfile = " << dir << "/pgbouncer.pid\n";
  }
  std::vector<std::string> argv;
  if (geteuid() == 0) {
    if (system(absl::StrCat("chown -R postgres:postgres ", dir).c_str()) != 0) {
      return absl::InternalError("chown failed");
    }
    argv = {"runuser", "-u", "postgres", "--"};
  }
  argv.push_back(kPgBouncer);
  argv.push_back(dir + "/pgbouncer.ini");
  auto process = Process::Spawn(argv, {}, dir + "/stdout.log");
  if (!process.ok()) return process.status();
  if (!WaitForListener(port, absl::Seconds(10))) {
    return absl::UnavailableError(absl::StrCat("pgbouncer did not start: ", (*process)->Log()));
  }
  return std::unique_ptr<PgBouncer>(new PgBouncer(dir, port, *std::move(process)));
}

PgBouncer::~PgBouncer() {
  process_.reset();  // kills and reaps it
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

std::string PgBouncer::Url(const std::string& database) const {
  return absl::StrCat("postgresql://postgres@127.0.0.1:", port_, "/", database);
}

absl::StatusOr<std::string> PgBouncer::Admin(const std::string& command) const {
  const std::string cmd = absl::StrCat("psql -X -A -t -F '|' -h 127.0.0.1 -p ", port_,
                                       " -U postgres -d pgbouncer -c '", command, "' 2>&1");
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) return absl::InternalError("popen failed");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  int status = pclose(f);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(absl::StrCat("pgbouncer admin `", command, "` failed: ", out));
  }
  return out;
}

}  // namespace mailroom::testing
