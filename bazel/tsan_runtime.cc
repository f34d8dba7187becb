// Linked into every binary and test of .bazelrc's --config=tsan (--custom_malloc=
// //bazel:tsan_runtime): ThreadSanitizer's suppressions, and Abseil's synchronisation made
// visible to it.
//
// Debian's Abseil is not built with ThreadSanitizer, so its Mutex, CondVar and Notification
// synchronise through atomics and futexes that ThreadSanitizer does not see: every access that
// an absl::Mutex orders (ours, and gRPC's, whose own mutexes are Abseil's) would be reported as
// a race. The linker sends each call of the functions below (-Wl,--wrap in .bazelrc; from any
// object but the one that defines the function) to its __wrap_ twin here, which tells
// ThreadSanitizer what the call does: a release before a mutex is unlocked or waited on, an
// acquire once it is held, and both around each evaluation of a waiter's absl::Condition
// (Abseil evaluates them with the mutex held, sometimes in the unlocking thread); a release by
// Notify() and an acquire by a wait that saw it; a release and an acquire by each
// absl::Status's drop of a shared reference. gRPC's own atomics stay invisible.
#include <cstdint>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

extern "C" {
void __tsan_acquire(void* addr);
void __tsan_release(void* addr);
}

namespace {

// A waiter's condition, evaluated as a critical section of its mutex.
struct Watched {
  const absl::Condition* cond;
  absl::Mutex* mu;
  static bool Eval(const Watched* w) {
    __tsan_acquire(w->mu);
    const bool r = w->cond->Eval();
    __tsan_release(w->mu);
    return r;
  }
};

}  // namespace

// NOLINTBEGIN(bugprone-reserved-identifier): the names the linker's --wrap gives
extern "C" {

// NOLINTNEXTLINE: the name ThreadSanitizer looks up
const char* __tsan_default_suppressions() {
  return
      // Abseil's deadlock detector: its graph of lock orders is guarded by a SpinLock of
      // Abseil's own (base_internal), which these wrappers do not cover.
      "race:absl::*::synchronization_internal::GraphCycles\n";
}

void __real__ZN4absl7debian35Mutex4LockEv(absl::Mutex* m);
void __real__ZN4absl7debian35Mutex6UnlockEv(absl::Mutex* m);
bool __real__ZN4absl7debian35Mutex7TryLockEv(absl::Mutex* m);
void __real__ZN4absl7debian35Mutex10ReaderLockEv(absl::Mutex* m);
void __real__ZN4absl7debian35Mutex12ReaderUnlockEv(absl::Mutex* m);
bool __real__ZN4absl7debian35Mutex13ReaderTryLockEv(absl::Mutex* m);
void __real__ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE(absl::Mutex* m,
                                                           const absl::Condition* c);
bool __real__ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE(
    absl::Mutex* m, const absl::Condition* c, absl::Duration t);
bool __real__ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE(
    absl::Mutex* m, const absl::Condition* c, absl::Time t);
void __real__ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE(absl::Mutex* m,
                                                              const absl::Condition* c);
bool __real__ZN4absl7debian35Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE(
    absl::Mutex* m, const absl::Condition* c, absl::Duration t);
bool __real__ZN4absl7debian35Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE(
    absl::Mutex* m, const absl::Condition* c, absl::Time t);
void __real__ZN4absl7debian35Mutex14ReaderLockWhenERKNS0_9ConditionE(absl::Mutex* m,
                                                                     const absl::Condition* c);
bool __real__ZN4absl7debian35Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE(
    absl::Mutex* m, const absl::Condition* c, absl::Duration t);
bool __real__ZN4absl7debian35Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE(
    absl::Mutex* m, const absl::Condition* c, absl::Time t);
void __real__ZN4absl7debian37CondVar4WaitEPNS0_5MutexE(absl::CondVar* cv, absl::Mutex* m);
bool __real__ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE(absl::CondVar* cv,
                                                                                 absl::Mutex* m,
                                                                                 absl::Duration t);
bool __real__ZN4absl7debian37CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE(absl::CondVar* cv,
                                                                              absl::Mutex* m,
                                                                              absl::Time t);
void __real__ZN4absl7debian319ReleasableMutexLock7ReleaseEv(absl::ReleasableMutexLock* l);

void __wrap__ZN4absl7debian35Mutex4LockEv(absl::Mutex* m) {
  __real__ZN4absl7debian35Mutex4LockEv(m);
  __tsan_acquire(m);
}

void __wrap__ZN4absl7debian35Mutex6UnlockEv(absl::Mutex* m) {
  __tsan_release(m);
  __real__ZN4absl7debian35Mutex6UnlockEv(m);
}

bool __wrap__ZN4absl7debian35Mutex7TryLockEv(absl::Mutex* m) {
  const bool r = __real__ZN4absl7debian35Mutex7TryLockEv(m);
  if (r) __tsan_acquire(m);
  return r;
}

void __wrap__ZN4absl7debian35Mutex10ReaderLockEv(absl::Mutex* m) {
  __real__ZN4absl7debian35Mutex10ReaderLockEv(m);
  __tsan_acquire(m);
}

void __wrap__ZN4absl7debian35Mutex12ReaderUnlockEv(absl::Mutex* m) {
  __tsan_release(m);
  __real__ZN4absl7debian35Mutex12ReaderUnlockEv(m);
}

bool __wrap__ZN4absl7debian35Mutex13ReaderTryLockEv(absl::Mutex* m) {
  const bool r = __real__ZN4absl7debian35Mutex13ReaderTryLockEv(m);
  if (r) __tsan_acquire(m);
  return r;
}

void __wrap__ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE(absl::Mutex* m,
                                                           const absl::Condition* c) {
  const Watched watched{c, m};
  const absl::Condition w(&Watched::Eval, &watched);
  __tsan_release(m);
  __real__ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE(m, &w);
  __tsan_acquire(m);
}

bool __wrap__ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE(
    absl::Mutex* m, const absl::Condition* c, absl::Duration t) {
  const Watched watched{c, m};
  const absl::Condition w(&Watched::Eval, &watched);
  __tsan_release(m);
  const bool r = __real__ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE(m,
                                                                                                 &w,
                                                                                                 t);
  __tsan_acquire(m);
  return r;
}

bool __wrap__ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE(
    absl::Mutex* m, const absl::Condition* c, absl::Time t) {
  const Watched watched{c, m};
  const absl::Condition w(&Watched::Eval, &watched);
  __tsan_release(m);
  const bool r = __real__ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE(m, &w,
                                                                                              t);
  __tsan_acquire(m);
  return r;
}

void __wrap__ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE(absl::Mutex* m,
                                                              const absl::Condition* c) {
  const Watched watched{c, m};
  const absl::Condition w(&Watched::Eval, &watched);
  __real__ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE(m, &w);
  __tsan_acquire(m);
}

bool __wrap__ZN4absl7debian35Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE(
    absl::Mutex* m, const absl::Condition* c, absl::Duration t) {
  const Watched watched{c, m};
  const absl::Condition w(&Watched::Eval, &watched);
  const bool r = __real__ZN4absl7debian35Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE(
      m, &w, t);
  __tsan_acquire(m);
  return r;
}

bool __wrap__ZN4absl7debian35Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE(
    absl::Mutex* m, const absl::Condition* c, absl::Time t) {
  const Watched watched{c, m};
  const absl::Condition w(&Watched::Eval, &watched);
  const bool r = __real__ZN4absl7debian35Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE(m,
                                                                                                 &w,
                                                                                                 t);
  __tsan_acquire(m);
  return r;
}

void __wrap__ZN4absl7debian35Mutex14ReaderLockWhenERKNS0_9ConditionE(absl::Mutex* m,
                                                                     const absl::Condition* c) {
  const Watched watched{c, m};
  const absl::Condition w(&Watched::Eval, &watched);
  __real__ZN4absl7debian35Mutex14ReaderLockWhenERKNS0_9ConditionE(m, &w);
  __tsan_acquire(m);
}

bool __wrap__ZN4absl7debian35Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE(
    absl::Mutex* m, const absl::Condition* c, absl::Duration t) {
  const Watched watched{c, m};
  const absl::Condition w(&Watched::Eval, &watched);
  const bool r =
      __real__ZN4absl7debian35Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE(m,
                                                                                               &w,
                                                                                               t);
  __tsan_acquire(m);
  return r;
}

bool __wrap__ZN4absl7debian35Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE(
    absl::Mutex* m, const absl::Condition* c, absl::Time t) {
  const Watched watched{c, m};
  const absl::Condition w(&Watched::Eval, &watched);
  const bool r =
      __real__ZN4absl7debian35Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE(m, &w,
                                                                                            t);
  __tsan_acquire(m);
  return r;
}

void __wrap__ZN4absl7debian37CondVar4WaitEPNS0_5MutexE(absl::CondVar* cv, absl::Mutex* m) {
  __tsan_release(m);
  __real__ZN4absl7debian37CondVar4WaitEPNS0_5MutexE(cv, m);
  __tsan_acquire(m);
}

bool __wrap__ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE(absl::CondVar* cv,
                                                                                 absl::Mutex* m,
                                                                                 absl::Duration t) {
  __tsan_release(m);
  const bool r = __real__ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE(cv, m,
                                                                                             t);
  __tsan_acquire(m);
  return r;
}

bool __wrap__ZN4absl7debian37CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE(absl::CondVar* cv,
                                                                              absl::Mutex* m,
                                                                              absl::Time t) {
  __tsan_release(m);
  const bool r = __real__ZN4absl7debian37CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE(cv, m, t);
  __tsan_acquire(m);
  return r;
}

void __wrap__ZN4absl7debian319ReleasableMutexLock7ReleaseEv(absl::ReleasableMutexLock* l) {
  // The lock's only member is its mutex (absl/synchronization/mutex.h).
  absl::Mutex* m = *reinterpret_cast<absl::Mutex**>(l);
  if (m != nullptr) __tsan_release(m);
  __real__ZN4absl7debian319ReleasableMutexLock7ReleaseEv(l);
}

// absl::Notification: its waits return at once, without the mutex, once it has been notified.
void __real__ZN4absl7debian312Notification6NotifyEv(absl::Notification* n);
void __wrap__ZN4absl7debian312Notification6NotifyEv(absl::Notification* n) {
  __tsan_release(n);
  __real__ZN4absl7debian312Notification6NotifyEv(n);
}
void __real__ZNK4absl7debian312Notification19WaitForNotificationEv(const absl::Notification* n);
void __wrap__ZNK4absl7debian312Notification19WaitForNotificationEv(const absl::Notification* n) {
  __real__ZNK4absl7debian312Notification19WaitForNotificationEv(n);
  __tsan_acquire(const_cast<absl::Notification*>(n));
}
bool __real__ZNK4absl7debian312Notification30WaitForNotificationWithTimeoutENS0_8DurationE(
    const absl::Notification* n, absl::Duration t);
bool __wrap__ZNK4absl7debian312Notification30WaitForNotificationWithTimeoutENS0_8DurationE(
    const absl::Notification* n, absl::Duration t) {
  const bool r =
      __real__ZNK4absl7debian312Notification30WaitForNotificationWithTimeoutENS0_8DurationE(n, t);
  if (r) __tsan_acquire(const_cast<absl::Notification*>(n));
  return r;
}
bool __real__ZNK4absl7debian312Notification31WaitForNotificationWithDeadlineENS0_4TimeE(
    const absl::Notification* n, absl::Time t);
bool __wrap__ZNK4absl7debian312Notification31WaitForNotificationWithDeadlineENS0_4TimeE(
    const absl::Notification* n, absl::Time t) {
  const bool r = __real__ZNK4absl7debian312Notification31WaitForNotificationWithDeadlineENS0_4TimeE(
      n, t);
  if (r) __tsan_acquire(const_cast<absl::Notification*>(n));
  return r;
}

// absl::Status's shared representation: its last reference frees it, after every other
// holder's last use (a reference count, which ThreadSanitizer sees only as atomics).
void __real__ZN4absl7debian36Status15UnrefNonInlinedEm(uintptr_t rep);
void __wrap__ZN4absl7debian36Status15UnrefNonInlinedEm(uintptr_t rep) {
  __tsan_release(reinterpret_cast<void*>(rep));
  __tsan_acquire(reinterpret_cast<void*>(rep));
  __real__ZN4absl7debian36Status15UnrefNonInlinedEm(rep);
}

}  // extern "C"
// NOLINTEND(bugprone-reserved-identifier)
