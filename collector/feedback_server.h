#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "collector/feedback_store.h"
#include "collector/sns_verifier.h"
#include "common/metrics.h"

struct mg_context;
struct mg_connection;

namespace mailroom {

// An HTTP answer: status and a short plain-text body.
struct HttpReply {
  int status = 200;
  std::string body;
};

// What the feedback endpoint does with one POSTed SNS message, without HTTP:
//  * 400 for a body that is not an SNS message or a notification that is not an SES event;
//  * 403 for anything that fails verification (SnsVerifier: forged, unsigned, expired, a
//    certificate from a host other than sns.<region>.amazonaws.com, an unlisted topic), or a
//    SubscribeURL on such a host; nothing is recorded;
//  * SubscriptionConfirmation: GETs SubscribeURL (confirming the subscription), 200;
//  * Notification: records the SES event once per SNS MessageId (FeedbackStore), 200;
//  * 503 when the database or the certificate/SubscribeURL host cannot be reached (SNS
//    retries).
// Thread-safe; counts mailroom_collector_feedback_total{type,result}.
class FeedbackHandler {
 public:
  // `confirm` GETs a SubscribeURL; `extra_hosts` as SnsVerifierOptions::extra_hosts. None of
  // the pointers is owned; all must outlive the handler.
  FeedbackHandler(SnsVerifier* verifier, FeedbackStore* store, UrlFetcher confirm,
                  std::vector<std::string> extra_hosts, int soft_bounce_limit, Metrics* metrics);
  HttpReply Post(const std::string& body);

 private:
  HttpReply Count(const std::string& type, const char* result, HttpReply reply);

  SnsVerifier* const verifier_;
  FeedbackStore* const store_;
  const UrlFetcher confirm_;
  const std::vector<std::string> extra_hosts_;
  const int soft_bounce_limit_;
  Metrics* const metrics_;
};

// How the feedback endpoint bounds its clients. The defaults are the production values
// (MAILROOM_FEEDBACK_WORKERS, MAILROOM_FEEDBACK_REQUEST_TIMEOUT read them from here).
struct FeedbackServerOptions {
  static constexpr int kDefaultWorkers = 32;
  static constexpr int64_t kDefaultRequestTimeoutMs = 6000;

  // Larger bodies get 413 (SNS messages are a few KB; 256 KiB is their maximum).
  size_t max_body = 256 * 1024;
  // Requests served at once; more wait for a worker.
  int workers = kDefaultWorkers;
  // A request (headers and body) not received whole within this is answered 408 and its
  // connection closed: a slow or idle client holds a worker at most this long.
  absl::Duration request_timeout = absl::Milliseconds(kDefaultRequestTimeoutMs);
};

// Serves the feedback endpoint over HTTP (civetweb) on `address` (host:port; port 0 picks a
// free one): POST goes to the handler (any path); another method gets 405, a body larger than
// max_body 413, a request not received whole within request_timeout 408; once answered, a
// connection closes without the rest of its declared body being read. With fewer slow clients
// than workers a notification is answered at once; with more, within about a third of
// request_timeout (at most all of it) per `workers` slow clients ahead of it. Put it behind a TLS-terminating proxy
// (SNS requires HTTPS for anything but tests). Stop() or destruction stops it. Not
// thread-safe: start and stop it from one thread.
class FeedbackServer {
 public:
  FeedbackServer() = default;
  ~FeedbackServer();
  FeedbackServer(const FeedbackServer&) = delete;
  FeedbackServer& operator=(const FeedbackServer&) = delete;

  // kInvalidArgument for a malformed address, kUnavailable when it cannot be bound.
  absl::Status Start(const std::string& address, FeedbackHandler* handler,
                     FeedbackServerOptions options = {});
  int port() const { return port_; }
  void Stop();

 private:
  static int Handle(mg_connection* conn, void* self);

  mg_context* ctx_ = nullptr;
  FeedbackHandler* handler_ = nullptr;
  FeedbackServerOptions options_;
  std::string host_;
  int port_ = 0;
};

}  // namespace mailroom
