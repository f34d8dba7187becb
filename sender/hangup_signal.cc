#include "sender/hangup_signal.h"

#include <pthread.h>

#include <utility>

namespace mailroom {

HangupSignal::HangupSignal() {
  sigemptyset(&set_);
  sigaddset(&set_, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set_, nullptr);
}

HangupSignal::~HangupSignal() { Stop(); }

void HangupSignal::Start(std::function<void()> on_hangup) {
  thread_ = std::thread([this, on_hangup = std::move(on_hangup)] {
    for (;;) {
      int sig = 0;
      if (sigwait(&set_, &sig) != 0) continue;
      if (stopping_.load()) return;
      on_hangup();
    }
  });
}

void HangupSignal::Stop() {
  if (!thread_.joinable()) return;
  stopping_ = true;
  // Directed at the thread: it is the one waiting for the signal, which stays blocked.
  pthread_kill(thread_.native_handle(), SIGHUP);
  thread_.join();
}

}  // namespace mailroom
