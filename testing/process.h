#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace mailroom::testing {

// A child process started by a test: its own process group, stdout and stderr appended to a
// log file, the parent's environment plus `env`. The destructor kills the whole group
// (SIGKILL) and reaps it, so a failing test leaves nothing running. Not thread-safe.
class Process {
 public:
  static absl::StatusOr<std::unique_ptr<Process>> Spawn(
      const std::vector<std::string>& argv, const std::map<std::string, std::string>& env = {},
      const std::string& log_path = "");
  ~Process();

  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  // Sends `sig` to the process group.
  void Signal(int sig);
  // Waits up to `timeout` for the process to exit; returns its exit code (128+signal when
  // killed) or DeadlineExceeded.
  absl::StatusOr<int> Wait(absl::Duration timeout);
  // True while the process has not exited.
  bool Running();
  // The log so far.
  std::string Log() const;
  // Waits until the log contains `needle`; false on timeout or exit.
  bool WaitForLog(const std::string& needle, absl::Duration timeout);

  pid_t pid() const { return pid_; }
  const std::string& log_path() const { return log_path_; }

 private:
  Process(pid_t pid, std::string log_path) : pid_(pid), log_path_(std::move(log_path)) {}
  pid_t pid_;
  std::string log_path_;
  bool exited_ = false;
  int exit_code_ = 0;
};

}  // namespace mailroom::testing
