#include "collector/feedback_server.h"

#include <civetweb.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "collector/feedback_event.h"
#include "common/log.h"

namespace mailroom {

FeedbackHandler::FeedbackHandler(SnsVerifier* verifier, FeedbackStore* store, UrlFetcher confirm,
                                 std::vector<std::string> extra_hosts, int soft_bounce_limit,
                                 Metrics* metrics)
    : verifier_(verifier),
      store_(store),
      confirm_(std::move(confirm)),
      extra_hosts_(std::move(extra_hosts)),
      soft_bounce_limit_(soft_bounce_limit),
      metrics_(metrics) {}

HttpReply FeedbackHandler::Count(const std::string& type, const char* result, HttpReply reply) {
  metrics_->Add("mailroom_collector_feedback_total", 1,
                {{"type", type.empty() ? "unknown" : type}, {"result", result}});
  return reply;
}

HttpReply FeedbackHandler::Post(const std::string& body) {
  auto m = ParseSnsMessage(body);
  if (!m.ok()) return Count("", "bad_request", {400, std::string(m.status().message())});
  const std::string type = m->type == "Notification" || m->type == "SubscriptionConfirmation" ||
                                   m->type == "UnsubscribeConfirmation"
                               ? m->type
                               : "unknown";
  absl::Status verified = verifier_->Verify(*m);
  if (!verified.ok()) {
    LogWarn("sns message refused", {{"sns_message_id", m->message_id.substr(0, 100)},
                                    {"type", type},
                                    {"error", std::string(verified.message())}});
    if (absl::IsPermissionDenied(verified)) {
      return Count(type, "forbidden", {403, std::string(verified.message())});
    }
    return Count(type, "unavailable", {503, std::string(verified.message())});
  }
  if (type == "SubscriptionConfirmation") {
    if (!SnsUrlAllowed(m->subscribe_url, extra_hosts_)) {
      return Count(type, "forbidden",
                   {403, "sns: SubscribeURL is not an https URL of an SNS host"});
    }
    auto confirmed = confirm_(m->subscribe_url);
    if (!confirmed.ok()) {
      LogWarn("sns subscription not confirmed",
              {{"topic", m->topic_arn}, {"error", std::string(confirmed.status().message())}});
      return Count(type, "unavailable", {503, "cannot confirm the subscription"});
    }
    LogInfo("sns subscription confirmed", {{"topic", m->topic_arn}});
    return Count(type, "confirmed", {200, "confirmed"});
  }
  if (type == "UnsubscribeConfirmation") {
    LogWarn("sns subscription ended", {{"topic", m->topic_arn}});
    return Count(type, "ignored", {200, "ok"});
  }
  auto event = ParseSesEvent(m->message);
  if (absl::IsUnimplemented(event.status())) {
    return Count(type, "ignored", {200, "ignored"});
  }
  if (!event.ok()) {
    return Count(type, "bad_request", {400, std::string(event.status().message())});
  }
  auto recorded = store_->Record(m->message_id, *event, soft_bounce_limit_);
  if (!recorded.ok()) {
    LogWarn("feedback not recorded", {{"error", std::string(recorded.status().message())}});
    return Count(type, "unavailable", {503, "feedback not recorded; retry"});
  }
  const char* result = *recorded == FeedbackResult::kDuplicate   ? "duplicate"
                       : *recorded == FeedbackResult::kUnmatched ? "unmatched"
                                                                 : "recorded";
  LogInfo("feedback", {{"event", event->type},
                       {"bounce_type", event->bounce_type},
                       {"job", absl::StrCat(event->job_id)},
                       {"group", event->group},
                       {"result", result}});
  metrics_->Add("mailroom_collector_feedback_events_total", 1,
                {{"event", event->type}, {"result", result}});
  return Count(type, result, {200, result});
}

FeedbackServer::~FeedbackServer() { Stop(); }

absl::Status FeedbackServer::Start(const std::string& address, FeedbackHandler* handler,
                                   FeedbackServerOptions options) {
  size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("bad feedback address ", address));
  }
  Stop();
  handler_ = handler;
  options_ = options;
  // civetweb's timeout bounds each wait for data, not a request: the headers may take up to
  // two of them, and each mg_read of the body up to two more. A sixth of the request timeout
  // per wait keeps headers (two waits) plus the body (read until a third of the timeout has
  // passed, the last read overrunning by two waits) within the request timeout.
  const std::string threads = absl::StrCat(options_.workers);
  const std::string wait_ms =
      absl::StrCat(std::max<int64_t>(1, absl::ToInt64Milliseconds(options_.request_timeout) / 6));
  const char* civet_options[] = {"listening_ports",
                                 address.c_str(),
                                 "num_threads",
                                 threads.c_str(),
                                 "request_timeout_ms",
                                 wait_ms.c_str(),
                                 "enable_keep_alive",
                                 "no",
                                 nullptr};
  mg_callbacks callbacks{};
  ctx_ = mg_start(&callbacks, nullptr, civet_options);
  if (ctx_ == nullptr) return absl::UnavailableError(absl::StrCat("cannot bind ", address));
  mg_server_port ports[4];
  int n = mg_get_server_ports(ctx_, 4, ports);
  if (n < 1) {
    Stop();
    return absl::UnavailableError(absl::StrCat("cannot bind ", address));
  }
  port_ = ports[0].port;
  host_ = address.substr(0, colon);
  mg_set_request_handler(ctx_, "/", &FeedbackServer::Handle, this);
  return absl::OkStatus();
}

int FeedbackServer::Handle(mg_connection* conn, void* p) {
  auto* self = static_cast<FeedbackServer*>(p);
  const mg_request_info* ri = mg_get_request_info(conn);
  const size_t max_body = self->options_.max_body;
  // See Start(): reading stops a third of the request timeout after the headers.
  const absl::Time read_until = absl::Now() + self->options_.request_timeout / 3;
  HttpReply reply;
  std::string extra;
  if (std::string(ri->request_method) != "POST") {
    reply = {405, "only POST"};
    extra = "Allow: POST\r\n";
  } else if (ri->content_length > static_cast<long long>(max_body)) {
    reply = {413, "body too large"};
  } else {
    std::string body;
    char buf[8192];
    int got = 0;
    bool too_big = false;
    bool late = false;
    // civetweb's mg_read(n) returns only once n bytes arrived or one wait (request_timeout_ms,
    // a sixth of the request timeout) passed without a byte: a client that sends one byte just
    // inside each wait would hold a read of 8 KiB for 8,192 waits. So each read asks for no
    // more bytes than half the waits left before `read_until` (at least one): a read ends
    // by then, or at most two waits later.
    const absl::Duration wait =
        std::max(absl::Milliseconds(1), self->options_.request_timeout / 6);
    auto next_read = [&]() {
      // A read of n bytes may take n + 1 waits: ask for half as many bytes as waits are left.
      const int64_t waits_left = (read_until - absl::Now()) / wait;
      return static_cast<size_t>(std::clamp<int64_t>(waits_left / 2, 1, sizeof(buf)));
    };
    while ((got = mg_read(conn, buf, next_read())) > 0) {
      body.append(buf, got);
      if (body.size() > max_body) {
        too_big = true;
        break;
      }
      if (ri->content_length >= 0 && body.size() >= static_cast<size_t>(ri->content_length)) {
        break;
      }
      if (absl::Now() >= read_until) {
        late = true;
        break;
      }
    }
    if (!late && ri->content_length >= 0 && body.size() < static_cast<size_t>(ri->content_length)) {
      late = true;  // civetweb's wait ran out before the declared body arrived
    }
    reply = too_big ? HttpReply{413, "body too large"}
            : late  ? HttpReply{408, "request not received in time"}
                    : self->handler_->Post(body);
  }
  const char* text = reply.status == 200   ? "OK"
                     : reply.status == 400 ? "Bad Request"
                     : reply.status == 403 ? "Forbidden"
                     : reply.status == 405 ? "Method Not Allowed"
                     : reply.status == 408 ? "Request Timeout"
                     : reply.status == 413 ? "Payload Too Large"
                                           : "Service Unavailable";
  reply.body += "\n";
  // Once answered, the connection closes without reading what is left of the declared body:
  // civetweb would otherwise discard it read by read after the handler returns, and a client
  // sending a byte inside every wait would hold the worker until its whole body arrived.
  mg_disable_connection_keep_alive(conn);
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\n"
            "Content-Length: %zu\r\n%sConnection: close\r\n\r\n",
            reply.status, text, reply.body.size(), extra.c_str());
  mg_write(conn, reply.body.data(), reply.body.size());
  return reply.status;
}

void FeedbackServer::Stop() {
  if (ctx_ == nullptr) return;
  // civetweb's listener notices the stop only when its poll() returns: knock until it is gone.
  std::atomic<bool> stopped{false};
  std::thread stopper([&] {
    mg_stop(ctx_);
    stopped = true;
  });
  while (!stopped) {
    KnockTcp(host_, port_);
    absl::SleepFor(absl::Milliseconds(20));
  }
  stopper.join();
  ctx_ = nullptr;
  port_ = 0;
}

}  // namespace mailroom
