#pragma once

#include <signal.h>

#include <atomic>
#include <functional>
#include <thread>

namespace mailroom {

// SIGHUP, taken by a thread of its own: each one calls a function (the sender reads its
// templates again). Construct it before any other thread starts: the constructor blocks SIGHUP
// in the calling thread, and threads started later inherit that, so no thread dies of it.
class HangupSignal {
 public:
  HangupSignal();
  ~HangupSignal();  // Stop()
  HangupSignal(const HangupSignal&) = delete;
  HangupSignal& operator=(const HangupSignal&) = delete;

  // Calls `on_hangup` on the signal's thread for each SIGHUP (signals that arrive while it runs
  // may be merged into one call). Once.
  void Start(std::function<void()> on_hangup);
  // Ends the thread and waits for it (a call in progress finishes). Idempotent.
  void Stop();

 private:
  sigset_t set_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace mailroom
