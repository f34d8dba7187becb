#include "testing/pg_server.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace mailroom::testing {
namespace {

constexpr char kPgBin[] = "/usr/lib/postgresql/15/bin";

// Runs a shell command; returns its stdout, or an error with its output.
absl::StatusOr<std::string> Run(const std::string& cmd) {
  std::string out;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return absl::InternalError("popen failed");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int rc = pclose(p);
  if (rc != 0) return absl::InternalError(absl::StrCat("`", cmd, "` failed: ", out));
  return out;
}

std::string Quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') q += "'\\''";
    else q += c;
  }
  return q + "'";
}

// Prefix that runs a command as postgres when we are root.
std::string AsPostgres() { return geteuid() == 0 ? "runuser -u postgres -- " : ""; }

}  // namespace

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  int port = ntohs(addr.sin_port);
  close(fd);
  return port;
}

bool WaitForListener(int port, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    const bool up = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    close(fd);
    if (up) return true;
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
}

std::string Runfile(const std::string& path) {
  for (const char* var : {"TEST_SRCDIR", "RUNFILES_DIR"}) {
    const char* dir = std::getenv(var);
    if (dir != nullptr && std::filesystem::exists(absl::StrCat(dir, "/", path))) {
      return absl::StrCat(dir, "/", path);
    }
  }
  // Relative to the working directory (the runfiles root of `mailroom` under bazel test).
  std::string rel = path.substr(path.find('/') + 1);
  return std::filesystem::absolute(rel).string();
}

absl::StatusOr<std::unique_ptr<PgServer>> PgServer::Start(bool durable) {
  if (!std::filesystem::exists(absl::StrCat(kPgBin, "/initdb"))) {
    return absl::FailedPreconditionError(
        "PostgreSQL 15 is not installed (apt-get install postgresql)");
  }
  char tmpl[] = "/tmp/mailroom-pg.XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return absl::InternalError("mkdtemp failed");
  std::string dir = tmpl;
  if (geteuid() == 0) {
    auto r = Run(absl::StrCat("chown postgres:postgres ", dir));
    if (!r.ok()) return r.status();
  }
  auto init = Run(absl::StrCat(AsPostgres(), kPgBin, "/initdb -D ", dir,
                               "/data -U postgres -A trust -E UTF8 --locale=C.UTF-8 --no-sync"));
  if (!init.ok()) return init.status();
  std::unique_ptr<PgServer> server(new PgServer(dir, FreePort(), durable));
  auto st = server->StartServer();
  if (!st.ok()) return st;
  st = server->StartWatchdog();
  if (!st.ok()) return st;
  // The tests' superuser plays the application too, and an application finds mailroom's
  // accounts, tokens and interface through its role's search path (docs/integration.md).
  auto path = server->Psql("postgres",
                           "ALTER ROLE postgres SET search_path = \"$user\", public, mailroom");
  if (!path.ok()) return path.status();
  return server;
}

// A test killed by its timeout (SIGTERM, then SIGKILL) or a benchmark stopped with Ctrl-C
// never runs the destructor, and its PostgreSQL would keep running. The watchdog, in its own
// session so that it outlives the process group, polls this process once a second; when the
// process is gone and the cluster is still there, it stops the server at once and deletes the
// directory. After a normal destructor the directory is gone and the watchdog simply exits.
absl::Status PgServer::StartWatchdog() {
  std::string data = absl::StrCat(dir_, "/data");
  std::string script = absl::StrCat("while kill -0 ", getpid(), " 2>/dev/null && [ -d ",
                                    Quote(data), " ]; do sleep 1; done; ", "if [ -d ", Quote(data),
                                    " ]; then ", AsPostgres(), kPgBin, "/pg_ctl -D ", Quote(data),
                                    " -m immediate -w stop; rm -rf ", Quote(dir_), "; fi");
  auto r = Run(absl::StrCat("setsid sh -c ", Quote(script), " </dev/null >/dev/null 2>&1 &"));
  return r.ok() ? absl::OkStatus() : r.status();
}

absl::Status PgServer::StartServer() {
  auto r = Run(absl::StrCat(
      AsPostgres(), kPgBin, "/pg_ctl -D ", dir_, "/data -l ", dir_, "/server.log -w -t 60 -o ",
      Quote(absl::StrCat(
          "-c listen_addresses=127.0.0.1 -p ", port_, " -k ", dir_,
          durable_ ? "" : " -c fsync=off -c synchronous_commit=off -c full_page_writes=off",
          " -c max_connections=200")),
      " start"));
  if (!r.ok()) return r.status();
  running_ = true;
  return absl::OkStatus();
}

absl::Status PgServer::Stop() { return Shutdown("fast"); }

absl::Status PgServer::Crash() { return Shutdown("immediate"); }

absl::Status PgServer::Shutdown(const char* mode) {
  if (!running_) return absl::OkStatus();
  auto r = Run(
      absl::StrCat(AsPostgres(), kPgBin, "/pg_ctl -D ", dir_, "/data -m ", mode, " -w stop"));
  running_ = false;
  return r.ok() ? absl::OkStatus() : r.status();
}

absl::Status PgServer::Resume() { return StartServer(); }

PgServer::~PgServer() {
  (void)Stop();
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

std::string PgServer::Url(const std::string& database) const {
  return absl::StrCat("postgresql://postgres@127.0.0.1:", port_, "/", database);
}

absl::StatusOr<std::string> PgServer::CreateDatabase(const std::string& name) {
  auto r = Psql("postgres", absl::StrCat("CREATE DATABASE \"", name, "\""));
  if (!r.ok()) return r.status();
  return Url(name);
}

absl::StatusOr<std::string> PgServer::Psql(const std::string& database, const std::string& sql) {
  return Run(absl::StrCat("psql -X -qtA -v ON_ERROR_STOP=1 -h 127.0.0.1 -p ", port_,
                          " -U postgres -d ", Quote(database), " -c ", Quote(sql)));
}

}  // namespace mailroom::testing
