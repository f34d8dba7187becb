#pragma once

#include <curl/curl.h>

#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/worker_thread.h"

namespace mailroom {

// One thread that drives every transfer of a transport through one libcurl multi handle.
// With curl_easy_perform each sending thread sleeps in poll() and wakes once per protocol round
// trip; here one wake-up of the loop serves every connection that is
// ready, and a sending thread wakes once, when its transfer is over.
//
// The connections belong to the multi handle, not to the easy handles: a finished transfer
// leaves its connection (SMTP session, HTTP keep-alive) in the loop's cache, and the next
// transfer with the same target and options takes it up, whichever easy handle it runs on.
// The cache keeps at most `max_connections` idle connections, so a transport whose
// CurlHandlePool has that many handles keeps that many connections open between messages.
//
// Callbacks of a transfer (read, write, header, debug) run on the loop thread while the caller
// waits in Perform(), so they may use the caller's stack. Thread-safe.
//
// The loop is only as concurrent as libcurl's protocol code: a step that waits in poll()
// stops every transfer of the loop meanwhile. libcurl's SMTP does so for each message's final
// reply (after the end of data), which is one reason SMTP does not use the loop (SmtpSession
// runs its own transactions); HTTP never waits inside a step.
class CurlMultiLoop {
 public:
  // What Perform() returns for a transfer the loop did not finish because it is being
  // destroyed: cut short, the message may be retried (CurlStatus: kUnavailable).
  static constexpr CURLcode kStopped = CURLE_ABORTED_BY_CALLBACK;

  explicit CurlMultiLoop(int max_connections);
  CurlMultiLoop(const CurlMultiLoop&) = delete;
  CurlMultiLoop& operator=(const CurlMultiLoop&) = delete;
  // Stops the loop thread; transfers not finished by then return kStopped (their callers may
  // still be waiting in Perform(): they return without touching the loop again). Idle
  // connections are closed (SMTP QUIT) as curl_easy_cleanup would have.
  ~CurlMultiLoop();

  // Runs the transfer configured on `easy` (not in any multi handle, not used by another
  // thread meanwhile) to its end and returns its result, as curl_easy_perform would; the
  // easy handle's infos (CURLINFO_RESPONSE_CODE, ...) and error buffer are then readable. To
  // end it at destruction the loop replaces the handle's progress callback.
  CURLcode Perform(CURL* easy);

 private:
  struct Transfer {
    CURL* easy;
    CURLcode result = CURLE_OK;
    absl::Notification done{};
  };

  void Run();
  // Adds the transfers handed over since the last call; false when the loop is stopping.
  bool TakeIncoming();
  // Hands back the transfers curl reports done.
  void Complete();
  // Ends every transfer in flight: kStopped, or its own result if it has just finished.
  void AbortAll();
  // Hands `t` back to its caller with `result` (the loop forgets it).
  static void Finish(Transfer* t, CURLcode result);

  CURLM* const multi_;
  absl::Mutex mu_;
  std::vector<Transfer*> incoming_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Transfers in the multi handle; the loop thread's own.
  std::unordered_map<CURL*, Transfer*> active_;
  // The loop thread. It blocks in curl_multi_poll, which WorkerThread cannot interrupt, and
  // ends on stopping_: the destructor sets it, wakes the poll with curl_multi_wakeup, then
  // Stop()s (joins) the worker. Last: stopped before the members Run() uses are destroyed.
  WorkerThread worker_{[this] { Run(); }};
};

}  // namespace mailroom
