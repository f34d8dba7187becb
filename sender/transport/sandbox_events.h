#pragma once

#include <cstdint>
#include <queue>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/http/curl_handle.h"
#include "common/worker_thread.h"

namespace mailroom {

// One event of the sandbox transport, as the collector's /feedback/sandbox path reads it (the
// delivery-report shape of docs/configuration.md).
struct SandboxEvent {
  std::string id;    // the webhook-id: unique per email and kind of event
  std::string body;  // the JSON report
};

// Where and how the sandbox's events are posted.
struct SandboxPosterOptions {
  std::string url;                // the collector's .../feedback/sandbox
  std::vector<std::string> keys;  // the whsec_ secrets' key bytes (secret)
  // How long after its email an event is first posted: the sender acknowledges the email in
  // the meantime, so that the collector knows the delivery's provider message id.
  absl::Duration delay = absl::Seconds(1);
  // Retries wait max(delay, 250 ms), doubled after each failed post up to max_backoff.
  absl::Duration max_backoff = absl::Seconds(30);
  int max_attempts = 10;  // posts of one event, the first included
  absl::Duration connect_timeout = absl::Seconds(10);
  absl::Duration timeout = absl::Seconds(30);
};

// Posts the sandbox transport's events to the collector from a worker thread of its own
// (common/worker_thread.h), each
// `delay` after Post, signed as Standard Webhooks specify (webhook-id, webhook-timestamp,
// webhook-signature; the http transport's signature). What the collector answers decides:
//  * 200 "recorded", "duplicate" or "ignored": done;
//  * 200 "unmatched": the collector matched no delivery (usually: the acknowledgement has not
//    arrived yet) and has consumed the event's id: posted again later under a new id (`id`.N
//    for the N-th post), so it cannot be answered "duplicate";
//  * 408, 429, 5xx (503: the database is unreachable) or no answer: posted again later under
//    the same id (an event that was recorded and whose answer was lost is then a duplicate);
//  * any other status (401/403: the secrets differ; 404: the path is off): dropped, logged.
// After `max_attempts` posts an event is dropped and logged. Thread-safe; Stop() (or the
// destructor) ends the thread: events not yet answered are dropped and counted in the log.
class SandboxEventPoster {
 public:
  // `clock` is not owned and must outlive the poster.
  SandboxEventPoster(SandboxPosterOptions options, Clock* clock);
  ~SandboxEventPoster();
  SandboxEventPoster(const SandboxEventPoster&) = delete;
  SandboxEventPoster& operator=(const SandboxEventPoster&) = delete;

  // Queues `event` to be posted `delay` + `extra` from now.
  void Post(SandboxEvent event, absl::Duration extra = absl::ZeroDuration());
  // Ends the thread (at most the current post's timeout later); idempotent.
  void Stop();

  // What became of the events so far, for logs and tests.
  struct Counts {
    int64_t answered = 0;  // recorded, duplicate or ignored
    int64_t dropped = 0;   // refused, out of attempts, or left when stopped
    int64_t posts = 0;     // requests made, retries included
  };
  Counts counts() const;
  // Waits until no event is queued or being posted; false after `timeout`.
  bool WaitIdle(absl::Duration timeout);

 private:
  struct Pending {
    absl::Time due;
    uint64_t seq;  // equal times: in the order posted
    int attempt;   // posts made so far
    SandboxEvent event;
    std::string post_id;  // the webhook-id of its next post
    bool operator>(const Pending& o) const { return due != o.due ? due > o.due : seq > o.seq; }
  };
  enum class Answer { kDone, kRetrySameId, kRetryNewId, kDrop };

  void Run();
  Answer PostOnce(const Pending& p);
  absl::Duration Backoff(int attempt) const;

  const SandboxPosterOptions options_;
  Clock* const clock_;
  CurlHandle curl_;  // used by the thread only

  mutable absl::Mutex mu_;
  std::priority_queue<Pending, std::vector<Pending>, std::greater<Pending>> queue_
      ABSL_GUARDED_BY(mu_);
  uint64_t seq_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;  // Stop() was called: Post queues nothing
  bool busy_ ABSL_GUARDED_BY(mu_) = false;      // a post is in flight
  Counts counts_ ABSL_GUARDED_BY(mu_);
  // Last: started once everything above is built, stopped before it is destroyed.
  WorkerThread worker_;
};

}  // namespace mailroom
