#include "sender/transport/curl_multi_loop.h"

#include <sys/socket.h>

#include <algorithm>

#include "common/http/curl_handle.h"

namespace mailroom {
namespace {

// curl_multi_poll returns earlier for socket activity, for curl's own timers (connect and
// transfer timeouts) and for curl_multi_wakeup; this bound is only a backstop.
constexpr int kMaxWaitMs = 60 * 1000;

int Abort(void*, curl_off_t, curl_off_t, curl_off_t, curl_off_t) { return 1; }

CURLM* NewMulti() {
  CurlGlobalInit();
  return curl_multi_init();
}

}  // namespace

CurlMultiLoop::CurlMultiLoop(int max_connections) : multi_(NewMulti()) {
  if (multi_ == nullptr) return;  // Perform() fails every transfer
  // libcurl's default (4 x the transfers in the handle at that moment) would close idle
  // connections whenever few transfers run; the transport means to keep all of its own.
  curl_multi_setopt(multi_, CURLMOPT_MAXCONNECTS, static_cast<long>(std::max(1, max_connections)));
  worker_.Start();
}

CurlMultiLoop::~CurlMultiLoop() {
  if (multi_ == nullptr) return;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    curl_multi_wakeup(multi_);  // Run() sees stopping_ and returns
  }
  worker_.Stop();  // joins
  curl_multi_cleanup(multi_);
}

CURLcode CurlMultiLoop::Perform(CURL* easy) {
  if (multi_ == nullptr) return CURLE_OUT_OF_MEMORY;
  Transfer t{easy};
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return kStopped;
    incoming_.push_back(&t);
    // Under the lock: once the destructor has set stopping_, no caller touches multi_ again.
    curl_multi_wakeup(multi_);
  }
  t.done.WaitForNotification();
  return t.result;
}

void CurlMultiLoop::Run() {
  while (TakeIncoming()) {
    int running = 0;
    curl_multi_perform(multi_, &running);
    Complete();
    if (curl_multi_poll(multi_, nullptr, 0, kMaxWaitMs, nullptr) != CURLM_OK) {
      // poll() itself failed (CURLM_UNRECOVERABLE_POLL): nothing in flight can progress. End
      // it, and wait for new work instead of spinning on the same failure.
      AbortAll();
      absl::MutexLock lock(&mu_);
      auto work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !incoming_.empty();
      };
      mu_.Await(absl::Condition(&work));
    }
  }
  AbortAll();
}

void CurlMultiLoop::AbortAll() {
  // Removing an unfinished transfer is not enough: curl 7.88 then ends an SMTP upload as if it
  // were complete (it sends the "." and blocks for the reply, up to the transfer's timeout).
  // A transfer aborted by its progress callback instead ends with its connection closed.
  for (auto& [easy, t] : active_) {
    curl_easy_setopt(easy, CURLOPT_XFERINFOFUNCTION, Abort);
    curl_easy_setopt(easy, CURLOPT_NOPROGRESS, 0L);
  }
  int running = 0;
  curl_multi_perform(multi_, &running);  // runs every transfer once: each one aborts
  Complete();
  // Still there: no connection yet (resolving), nothing to end on the wire.
  for (auto& [easy, t] : active_) {
    curl_multi_remove_handle(multi_, easy);
    Finish(t, kStopped);
  }
  active_.clear();
}

bool CurlMultiLoop::TakeIncoming() {
  std::vector<Transfer*> added;
  bool stopping;
  {
    absl::MutexLock lock(&mu_);
    added.swap(incoming_);
    stopping = stopping_;
  }
  for (Transfer* t : added) {
    if (stopping) {
      Finish(t, kStopped);
      continue;
    }
    const CURLMcode mc = curl_multi_add_handle(multi_, t->easy);
    if (mc != CURLM_OK) {  // out of memory, or a handle already in a multi handle (a bug)
      Finish(t, mc == CURLM_OUT_OF_MEMORY ? CURLE_OUT_OF_MEMORY : CURLE_BAD_FUNCTION_ARGUMENT);
      continue;
    }
    active_[t->easy] = t;
  }
  return !stopping;
}

void CurlMultiLoop::Complete() {
  int left = 0;
  while (CURLMsg* m = curl_multi_info_read(multi_, &left)) {
    if (m->msg != CURLMSG_DONE) continue;
    CURL* easy = m->easy_handle;
    const CURLcode result = m->data.result;
    if (result == CURLE_OPERATION_TIMEDOUT) {
      // A reply is still due on that connection, and curl 7.88 keeps an SMTP connection after
      // "server response timeout": reused, the late reply would answer the next message's
      // command. Shut it (while the handle still finds it: before removal); curl drops it.
      curl_socket_t sock = CURL_SOCKET_BAD;
      if (curl_easy_getinfo(easy, CURLINFO_ACTIVESOCKET, &sock) == CURLE_OK &&
          sock != CURL_SOCKET_BAD) {
        shutdown(sock, SHUT_RDWR);
      }
    }
    // `m` is invalid from here. Removal keeps the connection in the cache (unless curl marked
    // it for closing) and leaves the handle's infos for its caller.
    curl_multi_remove_handle(multi_, easy);
    auto it = active_.find(easy);
    if (it == active_.end()) continue;
    Transfer* t = it->second;
    active_.erase(it);
    Finish(t, result);
  }
}

void CurlMultiLoop::Finish(Transfer* t, CURLcode result) {
  t->result = result;
  t->done.Notify();  // `t` belongs to its caller again, which may free it at once
}

}  // namespace mailroom
