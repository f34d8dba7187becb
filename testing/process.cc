#include "testing/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace mailroom::testing {

absl::StatusOr<std::unique_ptr<Process>> Process::Spawn(
    const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
    const std::string& log_path) {
  if (argv.empty()) return absl::InvalidArgumentError("empty argv");
  std::string log = log_path;
  if (log.empty()) {
    const char* outdir = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR");
    static int counter = 0;
    log = absl::StrCat(outdir != nullptr ? outdir : "/tmp", "/proc-", getpid(), "-", ++counter,
                       ".log");
  }
  int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot open ", log));
  pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    setpgid(0, 0);
    dup2(fd, 1);
    dup2(fd, 2);
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> args;
    args.reserve(argv.size() + 1);
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  close(fd);
  setpgid(pid, pid);
  return std::unique_ptr<Process>(new Process(pid, log));
}

Process::~Process() {
  if (!exited_) {
    kill(-pid_, SIGKILL);
    int status;
    waitpid(pid_, &status, 0);
  } else {
    kill(-pid_, SIGKILL);  // stray grandchildren
  }
}

void Process::Signal(int sig) {
  if (!exited_) kill(-pid_, sig);
}

absl::StatusOr<int> Process::Wait(absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  while (!exited_) {
    int status;
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      exited_ = true;
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      break;
    }
    if (absl::Now() > deadline) return absl::DeadlineExceededError("process still running");
    absl::SleepFor(absl::Milliseconds(10));
  }
  return exit_code_;
}

bool Process::Running() { return !Wait(absl::ZeroDuration()).ok(); }

std::string Process::Log() const {
  std::ifstream f(log_path_);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool Process::WaitForLog(const std::string& needle, absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (absl::StrContains(Log(), needle)) return true;
    if (!Running()) return absl::StrContains(Log(), needle);
    absl::SleepFor(absl::Milliseconds(20));
  }
  return false;
}

}  // namespace mailroom::testing
