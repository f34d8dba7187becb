#include "testing/pg_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace mailroom::testing {
namespace {

bool Accepts(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  close(fd);
  return ok;
}

TEST(PgServerTest, DestructorStopsTheServerAndDeletesItsDirectory) {
  auto pg = PgServer::Start();
  ASSERT_TRUE(pg.ok()) << pg.status();
  int port = (*pg)->port();
  std::string dir = (*pg)->dir();
  ASSERT_TRUE(Accepts(port));
  pg->reset();
  EXPECT_FALSE(Accepts(port));
  EXPECT_FALSE(std::filesystem::exists(dir));
}

// A test killed by its timeout or a benchmark stopped with Ctrl-C never destroys its server:
// the watchdog stops it and deletes the directory once the process is gone.
TEST(PgServerTest, ServerOfAProcessThatDiedWithoutCleaningUpIsStopped) {
  int fds[2];
  // Close-on-exec: the server and the watchdog the child starts must not hold the write end.
  ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(fds[0]);
    auto pg = PgServer::Start();
    std::string msg = pg.ok() ? absl::StrCat((*pg)->port(), " ", (*pg)->dir()) : "error";
    (void)!write(fds[1], msg.data(), msg.size());
    close(fds[1]);
    _exit(0);  // no destructor runs, as after SIGKILL
  }
  close(fds[1]);
  std::string msg;
  char buf[512];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) msg.append(buf, n);
  close(fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  std::vector<std::string> parts = absl::StrSplit(msg, absl::MaxSplits(' ', 1));
  ASSERT_EQ(parts.size(), 2u) << msg;
  int port = std::stoi(parts[0]);
  const std::string& dir = parts[1];
  ASSERT_TRUE(Accepts(port)) << "the child's server should outlive the child at first";

  absl::Time deadline = absl::Now() + absl::Seconds(30);
  while ((Accepts(port) || std::filesystem::exists(dir)) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_FALSE(Accepts(port)) << "PostgreSQL of the dead process still accepts connections";
  EXPECT_FALSE(std::filesystem::exists(dir)) << dir;
}

}  // namespace
}  // namespace mailroom::testing
