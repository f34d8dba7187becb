// SIGHUP sent to the process reaches the signal's thread, each one a call; Stop ends it.
#include "sender/hangup_signal.h"

#include <signal.h>
#include <unistd.h>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace mailroom {
namespace {

TEST(HangupSignalTest, EachSignalToTheProcessIsACallAndStopEndsTheThread) {
  HangupSignal hangup;  // before any thread of this test starts
  absl::Mutex mu;
  absl::CondVar called;
  int calls = 0;
  hangup.Start([&] {
    absl::MutexLock lock(&mu);
    ++calls;
    called.SignalAll();
  });
  for (int expected = 1; expected <= 3; ++expected) {
    // One at a time: the next signal is sent once this one was taken.
    ASSERT_EQ(kill(getpid(), SIGHUP), 0);
    absl::MutexLock lock(&mu);
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (calls < expected && !called.WaitWithDeadline(&mu, deadline)) {
    }
    ASSERT_EQ(calls, expected) << "call " << expected << " never came";
  }
  hangup.Stop();
  hangup.Stop();  // idempotent
  absl::MutexLock lock(&mu);
  EXPECT_EQ(calls, 3);
}

}  // namespace
}  // namespace mailroom
