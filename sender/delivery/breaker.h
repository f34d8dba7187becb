#pragma once

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/backoff.h"
#include "common/clock.h"
#include "common/metrics.h"

namespace mailroom {

// A circuit breaker for the delivery provider. Closed, every send goes ahead. The first
// provider-wide failure (IsProviderError: authentication refused, certificate, SendingPaused,
// unreachable, ...) opens it: from then on sends are held (the caller hands their jobs back
// without failing or charging them), except one probe at a time, the first after 1 s, then
// after each failed probe twice as long, up to `max_backoff`. A provider that says how long to
// wait (Retry-After, X-RateLimit-Reset: ProviderRetryAfter) is waited for when that is longer,
// up to `max_backoff`: a provider's header never stops a probe for longer than our own wait. The
// first probe that reaches the provider (sent, or refused for a reason of its own message) closes
// it again.
//
// Opening logs one error line with the provider's reply (the transports never put credentials
// in it); closing logs one info line. Metrics, when given: gauge mailroom_sender_breaker_open
// (0/1), counter mailroom_sender_breaker_trips_total. Thread-safe; time comes from `clock`.
class Breaker {
 public:
  struct Options {
    absl::Duration initial_backoff = absl::Seconds(1);
    absl::Duration max_backoff = absl::Seconds(60);
    // Which transport it guards ("primary", "secondary"), logged as transport=NAME on its
    // lines when not empty (a sender with a secondary transport has two breakers).
    std::string name{};
  };
  enum class Decision {
    kSend,   // closed: send
    kProbe,  // open, and this send is the one probe: send, then Record() its outcome
    kHold,   // open: do not send; hand the job back
  };
  // Permission for one send, given back to Record() or Cancel().
  struct Ticket {
    Decision decision = Decision::kSend;
    uint64_t epoch = 0;  // the trip the ticket belongs to (stale outcomes are ignored)
  };

  Breaker(Options options, Clock* clock, Metrics* metrics = nullptr);

  // May a send start now?
  Ticket Admit();
  // The outcome of a send admitted with `ticket` (kSend or kProbe). A provider error opens the
  // breaker (or, from the probe, doubles the wait); anything else from the probe closes it.
  void Record(const Ticket& ticket, const absl::Status& outcome);
  // An admitted send that did not happen (budget, expiry): a probe slot is freed at once.
  void Cancel(const Ticket& ticket);

  bool open() const;
  // While open: the earliest time the next probe may start (an estimate while one is in
  // flight: now + the current backoff). InfinitePast while closed.
  absl::Time NextProbe() const;
  // While open: the provider's reply that opened it (or that the last probe got).
  std::string reason() const;
  int64_t trips() const;

 private:
  void SetGauge(bool open);

  const Options opt_;
  Clock* const clock_;
  Metrics* const metrics_;
  mutable absl::Mutex mu_;
  bool open_ ABSL_GUARDED_BY(mu_) = false;
  bool probing_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t trips_ ABSL_GUARDED_BY(mu_) = 0;
  // The waits between probes: initial_backoff, doubling up to max_backoff, exact (the tests and
  // the docs give them); backoff_ is the current one.
  JitteredExponentialBackOffStrategy probe_backoff_ ABSL_GUARDED_BY(mu_);
  absl::Duration backoff_ ABSL_GUARDED_BY(mu_);
  absl::Time next_probe_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Time opened_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::string reason_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mailroom
