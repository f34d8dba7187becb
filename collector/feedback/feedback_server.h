#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "collector/feedback/feedback_store.h"
#include "collector/feedback/http_request.h"
#include "collector/feedback/sns_verifier.h"
#include "common/metrics.h"

namespace mailroom {

// A connection of the feedback endpoint whose request has not arrived whole
// (feedback_server.cc).
struct PendingConnection;

// What the feedback endpoint does with one POSTed SNS message, without HTTP:
//  * 400 for a body that is not an SNS message (or is JSON nested more than 4 deep) or a
//    notification that is not an SES event;
//  * 403 for anything that fails verification (SnsVerifier: forged, unsigned, expired, a
//    certificate from a host other than sns.<region>.amazonaws.com, an unlisted topic), or a
//    SubscribeURL on such a host; nothing is recorded;
//  * SubscriptionConfirmation: GETs SubscribeURL (confirming the subscription), 200;
//  * Notification: records the SES event once per SNS MessageId (FeedbackStore), 200
//    `recorded`, `unmatched` or `duplicate`; an event attached to no delivery (its message id,
//    or its tags' job, and its recipient must match one) suppresses nothing unless
//    `suppress_unmatched`, and is counted in mailroom_collector_feedback_unmatched_total;
//  * 503 when the database or the certificate/SubscribeURL host cannot be reached (SNS
//    retries).
// Thread-safe; counts mailroom_collector_feedback_total{type,result}.
class FeedbackHandler : public HttpHandler {
 public:
  // `confirm` GETs a SubscribeURL; `extra_hosts` as SnsVerifierOptions::extra_hosts;
  // `suppress_unmatched`: SES is in MAILROOM_FEEDBACK_SUPPRESS_UNMATCHED. None of the pointers
  // is owned; all must outlive the handler.
  FeedbackHandler(SnsVerifier* verifier, FeedbackStore* store, UrlFetcher confirm,
                  std::vector<std::string> extra_hosts, int soft_bounce_limit, Metrics* metrics,
                  bool suppress_unmatched);
  HttpReply Post(const std::string& body);
  // Post(request.body): SNS's messages are the same on any path.
  HttpReply Handle(const HttpRequest& request) override { return Post(request.body); }

 private:
  HttpReply Count(const std::string& type, const char* result, HttpReply reply);

  SnsVerifier* const verifier_;
  FeedbackStore* const store_;
  const UrlFetcher confirm_;
  const std::vector<std::string> extra_hosts_;
  const int soft_bounce_limit_;
  Metrics* const metrics_;
  const bool suppress_unmatched_;
};

// How the feedback endpoint bounds its clients. The defaults are the production values
// (MAILROOM_FEEDBACK_WORKERS, MAILROOM_FEEDBACK_REQUEST_TIMEOUT read them from here).
struct FeedbackServerOptions {
  static constexpr int kDefaultWorkers = 32;
  static constexpr int64_t kDefaultRequestTimeoutMs = 6000;

  // Larger bodies get 413 (SNS messages are a few KB; 256 KiB is their maximum).
  size_t max_body = 256 * 1024;
  // Complete requests handled at once; more wait for a worker. A request is handed to a worker
  // only once it has arrived whole, so slow clients hold none.
  int workers = kDefaultWorkers;
  // A request (headers and body) not received whole within this of its connection being
  // accepted is answered 408 and its connection closed.
  absl::Duration request_timeout = absl::Milliseconds(kDefaultRequestTimeoutMs);
  // GET is answered too (the console's pages): a GET needs no Content-Length and has no body.
  // Off for the feedback endpoint, which only takes POSTs.
  bool allow_get = false;
};

// Serves the feedback endpoint over HTTP/1.1 on `address` (host:port, [v6]:port; port 0 picks
// a free one), one request per connection. One thread accepts connections and reads requests
// from all of them until each has arrived whole; only then does a worker hand it (path, header
// lines, body) to the handler (POST only, unless allow_get). Answered by that thread, each closing
// the connection without reading further: a malformed request line or header 400 (only HTTP/1.0
// and 1.1, lines ended by CRLF with no CR, LF or NUL inside and none folded, a Content-Length of
// digits), another method 405, no Content-Length 411, a body larger than max_body 413, headers over
// 16 KiB 431, a request not received whole within request_timeout 408. At most max_connections()
// connections wait to arrive whole or for a worker; a new one beyond that closes the one
// waiting to arrive whole that has received the fewest bytes per second since it was accepted,
// the oldest of equals (or itself, when all wait for a worker). The connection holding the
// most gets 503 when a read would take the bytes held past kMaxBuffered. So a notification is
// answered at once however many slow or idle clients are connected. Put it behind a
// TLS-terminating proxy (SNS requires HTTPS for anything but tests). Stop() or
// destruction stops it. Not thread-safe: start and stop it from one thread.
class FeedbackServer {
 public:
  // Connections waiting to arrive whole or for a worker: at most a quarter of the open-file
  // limit at Start() (the rest of the process needs descriptors too), never more than this.
  static constexpr size_t kMaxConnections = 1024;
  // Bytes held for requests not yet handled (the buffers of connections waiting to arrive whole
  // and the bodies of complete requests waiting for a worker) never exceed this: a read that
  // would go past it makes the waiting connections holding the most give way, each answered
  // 503 (the one reading among them if it holds the most). 32 MiB is 128 bodies of SNS's
  // largest size and an eighth of the collector's 256 MiB memory limit in deploy/.
  static constexpr size_t kMaxBuffered = 32 * 1024 * 1024;

  FeedbackServer() = default;
  ~FeedbackServer();
  FeedbackServer(const FeedbackServer&) = delete;
  FeedbackServer& operator=(const FeedbackServer&) = delete;

  // kInvalidArgument for a malformed address, kUnavailable when it cannot be bound.
  absl::Status Start(const std::string& address, HttpHandler* handler,
                     FeedbackServerOptions options = {});
  int port() const { return port_; }
  // The connections that may wait at once (see kMaxConnections).
  size_t max_connections() const { return max_connections_; }
  // The bytes held now against kMaxBuffered (allocated, not just received).
  size_t buffered_bytes() const { return buffered_.load(); }
  // The most buffered_bytes() has been since Start().
  size_t peak_buffered_bytes() const { return peak_buffered_.load(); }
  void Stop();

 private:
  // A request read whole: its connection, path, headers and body.
  struct Request {
    int fd = -1;
    HttpRequest http;
  };

  // The thread that accepts connections and reads them, one poll after another.
  void Receive();
  // Answers with 408 the waiting connections past their deadline; removes those answered.
  void ExpireDeadlines(std::vector<PendingConnection>& pending);
  // Reads what arrived on `p` into its buffer, within kMaxBuffered; false when `p` was answered
  // or closed meanwhile (or gave nothing this time).
  bool ReadInto(PendingConnection& p, std::vector<PendingConnection>& pending);
  // Once `p`'s headers are in: parses them and answers at once what needs no body. False when
  // `p` was answered.
  bool TakeHead(PendingConnection& p, size_t had);
  // Hands `p`'s request, arrived whole, to the workers.
  void Enqueue(PendingConnection& p);
  // Accepts what the listening socket has, within max_connections_ (the slowest gives way).
  void AcceptNew(std::vector<PendingConnection>& pending);
  // Answers (or just closes, for an empty `response`) a waiting connection, freeing its buffer.
  void Drop(PendingConnection& p, const std::string& response);
  void Work();  // each worker

  HttpHandler* handler_ = nullptr;
  FeedbackServerOptions options_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};  // written by Stop() to wake Receive()
  int port_ = 0;
  size_t max_connections_ = kMaxConnections;
  std::thread receiver_;
  std::vector<std::thread> workers_;
  absl::Mutex mu_;
  std::deque<Request> requests_ ABSL_GUARDED_BY(mu_);
  std::atomic<size_t> buffered_{0};
  std::atomic<size_t> peak_buffered_{0};
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace mailroom
