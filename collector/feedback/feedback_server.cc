#include "collector/feedback/feedback_server.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "collector/feedback/feedback_event.h"
#include "collector/metrics/collector_metrics.h"
#include "common/log.h"

namespace mailroom {

FeedbackHandler::FeedbackHandler(SnsVerifier* verifier, FeedbackStore* store, UrlFetcher confirm,
                                 std::vector<std::string> extra_hosts, int soft_bounce_limit,
                                 Metrics* metrics, bool suppress_unmatched)
    : verifier_(verifier), store_(store), confirm_(std::move(confirm)),
      extra_hosts_(std::move(extra_hosts)), soft_bounce_limit_(soft_bounce_limit),
      metrics_(metrics), suppress_unmatched_(suppress_unmatched) {}

HttpReply FeedbackHandler::Count(const std::string& type, const char* result, HttpReply reply) {
  metrics_->Add(collector_metrics::kFeedback, 1, {type.empty() ? "unknown" : type, result});
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
  auto recorded = store_->Record(m->message_id, *event, soft_bounce_limit_,
                                 {/*group=*/"", suppress_unmatched_});
  if (!recorded.ok()) {
    LogWarn("feedback not recorded", {{"error", std::string(recorded.status().message())}});
    return Count(type, "unavailable", {503, "feedback not recorded; retry"});
  }
  const char* result = ResultName(recorded->result);
  if (recorded->result == FeedbackResult::kUnmatched) {
    metrics_->Add(collector_metrics::kFeedbackUnmatched, 1, {"ses", recorded->unmatched_reason});
    LogInfo("feedback unmatched",
            {{"provider", "ses"},
             {"event", event->type},
             {"reason", recorded->unmatched_reason},
             {"message_id", event->message_ids.empty() ? "" : event->message_ids[0].substr(0, 100)},
             {"job", absl::StrCat(event->job_id)},
             {"group", event->group.substr(0, 100)},
             {"recipient_domains", RecipientDomains(event->recipients)},
             {"suppressed", recorded->suppressed ? "true" : "false"}});
  } else {
    LogInfo("feedback", {{"event", event->type},
                         {"bounce_type", event->bounce_type},
                         {"job", absl::StrCat(event->job_id)},
                         {"group", event->group},
                         {"result", result}});
  }
  metrics_->Add(collector_metrics::kFeedbackEvents, 1, {event->type, result});
  return Count(type, result, {200, result});
}

// The request line and headers, up to the blank line that ends them.
constexpr size_t kMaxHead = 16 * 1024;

// The deadlines' clock: monotonic, so that setting the wall clock neither times out every
// waiting connection nor keeps them forever.
using Clock = std::chrono::steady_clock;

// A connection whose request has not arrived whole.
struct PendingConnection {
  int fd = -1;  // -1 once answered or closed, until the pass that noticed ends
  Clock::time_point accepted;
  Clock::time_point deadline;
  std::vector<char> data{};  // grown as bytes arrive, never past what the request needs
  size_t body_at = 0;        // 0 until the headers are in, then where the body starts in `data`
  size_t content_length = 0;
  // What `data` may grow to: the headers' limit until they are in, then the whole request.
  size_t Needed() const { return body_at == 0 ? kMaxHead + 4 : body_at + content_length; }
  // The capacity `data` gets to take `more` bytes: doubling, but never past Needed().
  size_t CapacityFor(size_t more) const {
    const size_t size = data.size() + more;
    if (size <= data.capacity()) return data.capacity();
    return std::min(Needed(), std::max({size, 2 * data.capacity(), size_t{1024}}));
  }
};

namespace {

std::string Response(HttpReply reply, const std::string& extra_headers = "") {
  const char* text = reply.status == 200   ? "OK"
                     : reply.status == 303 ? "See Other"
                     : reply.status == 400 ? "Bad Request"
                     : reply.status == 401 ? "Unauthorized"
                     : reply.status == 403 ? "Forbidden"
                     : reply.status == 404 ? "Not Found"
                     : reply.status == 405 ? "Method Not Allowed"
                     : reply.status == 408 ? "Request Timeout"
                     : reply.status == 411 ? "Length Required"
                     : reply.status == 413 ? "Payload Too Large"
                     : reply.status == 431 ? "Request Header Fields Too Large"
                                           : "Service Unavailable";
  reply.body += "\n";
  return absl::StrCat("HTTP/1.1 ", reply.status, " ", text,
                      "\r\nContent-Type: ", reply.content_type,
                      "\r\nContent-Length: ", reply.body.size(), "\r\n", reply.headers,
                      extra_headers, "Connection: close\r\n\r\n", reply.body);
}

// Sends what the socket takes without waiting and closes the connection, reading nothing more.
void AnswerAndClose(int fd, const std::string& response) {
  send(fd, response.data(), response.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  shutdown(fd, SHUT_WR);
  close(fd);
}

// What the request line and headers say: the body's length, or the answer to give at once.
struct Head {
  HttpReply early{0, ""};  // status 0: read the body
  std::string extra_headers;
  size_t content_length = 0;
  bool expect_continue = false;
  std::string path;                                          // the request target without its query
  std::vector<std::pair<std::string, std::string>> headers;  // every line, value trimmed
  std::string method, query;                                 // POST or GET; after the `?`
};

// `s` without the spaces and tabs around it (HTTP's optional whitespace, and nothing else).
absl::string_view StripSpaces(absl::string_view s) {
  const size_t begin = s.find_first_not_of(" \t");
  if (begin == absl::string_view::npos) return {};
  return s.substr(begin, s.find_last_not_of(" \t") - begin + 1);
}

// RFC 9110's tchar: the characters of a `token`, which a field name must be.
bool IsTchar(unsigned char c) {
  return absl::ascii_isalnum(c) || (c != 0 && std::strchr("!#$%&'*+-.^_`|~", c) != nullptr);
}

Head ParseHead(absl::string_view head, size_t max_body, bool allow_get) {
  Head h;
  // A CR, LF or NUL inside a line, or a line folded onto the one before (starting with a space
  // or tab), is how one request is read as another by a proxy that parses differently.
  if (head.find('\0') != absl::string_view::npos) {
    h.early = {400, "bad header"};
    return h;
  }
  std::vector<absl::string_view> lines = absl::StrSplit(head, "\r\n");
  std::vector<absl::string_view> first = absl::StrSplit(lines[0], ' ');
  if (first.size() != 3 || (first[2] != "HTTP/1.1" && first[2] != "HTTP/1.0") || first[0].empty() ||
      first[1].empty() || lines[0].find_first_of("\r\n") != absl::string_view::npos) {
    h.early = {400, "bad request line"};
    return h;
  }
  // Every header line is checked before any is acted on: a field name is a token (RFC 9110,
  // 5.1: no space, colon, control, non-ASCII or delimiter such as '(' or '"'), so that no
  // header this endpoint reads one way can be read another way by a proxy in front of it.
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t colon = lines[i].find(':');
    if (colon == absl::string_view::npos || colon == 0 ||
        lines[i].find_first_of("\r\n") != absl::string_view::npos ||
        !std::all_of(lines[i].begin(), lines[i].begin() + colon,
                     [](char c) { return IsTchar(static_cast<unsigned char>(c)); })) {
      h.early = {400, "bad header"};
      return h;
    }
  }
  const bool get = allow_get && first[0] == "GET";
  if (first[0] != "POST" && !get) {
    h.early = {405, allow_get ? "only GET and POST" : "only POST"};
    h.extra_headers = allow_get ? "Allow: GET, POST\r\n" : "Allow: POST\r\n";
    return h;
  }
  int64_t length = -1;
  h.method = std::string(first[0]);
  const size_t question = first[1].find('?');
  h.path = std::string(first[1].substr(0, question));
  if (question != absl::string_view::npos) h.query = std::string(first[1].substr(question + 1));
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t colon = lines[i].find(':');
    const absl::string_view name = lines[i].substr(0, colon);
    const absl::string_view value = StripSpaces(lines[i].substr(colon + 1));
    h.headers.emplace_back(std::string(name), std::string(value));
    if (absl::EqualsIgnoreCase(name, "Content-Length")) {
      if (length >= 0 || value.empty() || value.size() > 18 ||
          value.find_first_not_of("0123456789") != absl::string_view::npos ||
          !absl::SimpleAtoi(value, &length)) {
        h.early = {400, "bad Content-Length"};
        return h;
      }
    } else if (absl::EqualsIgnoreCase(name, "Transfer-Encoding")) {
      h.early = {411, "Content-Length required"};
      return h;
    } else if (absl::EqualsIgnoreCase(name, "Expect")) {
      h.expect_continue = absl::EqualsIgnoreCase(value, "100-continue");
    }
  }
  if (get) {
    // A GET carries no body (a Content-Length of 0 at most).
    if (length > 0) h.early = {400, "a GET has no body"};
  } else if (length < 0) {
    h.early = {411, "Content-Length required"};
  } else if (static_cast<uint64_t>(length) > max_body) {
    h.early = {413, "body too large"};
  } else {
    h.content_length = static_cast<size_t>(length);
  }
  return h;
}

// Connections accepted per pass beyond the free places: each closes the slowest waiting one,
// and a pass that accepted the whole backlog would close the first of a burst before reading it.
constexpr size_t kAcceptsBeyondFree = 4;

// The live connection in `pending` (oldest first) accepted before `pass` (so its bytes were
// read by at least one poll: one accepted in this pass may hold a whole request not yet read)
// that has received the fewest bytes per second since it was accepted, the oldest of equals; an
// age under 10 ms counts as 10 ms so that one just accepted is not judged on its first
// instants. pending.end() if there is none.
std::vector<PendingConnection>::iterator Slowest(std::vector<PendingConnection>& pending,
                                                 Clock::time_point now, Clock::time_point pass) {
  auto rate = [now](const PendingConnection& p) {
    const std::chrono::duration<double> age = std::max<Clock::duration>(
        now - p.accepted, std::chrono::milliseconds(10));
    return p.data.size() / age.count();
  };
  auto slowest = pending.end();
  for (auto it = pending.begin(); it != pending.end(); ++it) {
    if (it->fd >= 0 && it->accepted < pass &&
        (slowest == pending.end() || rate(*it) < rate(*slowest))) {
      slowest = it;
    }
  }
  return slowest;
}

// Removes the connections dropped (fd -1).
void Sweep(std::vector<PendingConnection>& pending) {
  pending.erase(std::remove_if(pending.begin(), pending.end(),
                               [](const PendingConnection& p) { return p.fd < 0; }),
                pending.end());
}

// What a complete request holds against kMaxBuffered: its body and its path and header lines.
size_t RequestBytes(const HttpRequest& r) {
  size_t n = r.body.capacity() + r.path.capacity() + r.query.capacity();
  for (const auto& [name, value] : r.headers) n += name.capacity() + value.capacity();
  return n;
}

}  // namespace

FeedbackServer::~FeedbackServer() { Stop(); }

absl::Status FeedbackServer::Start(const std::string& address, HttpHandler* handler,
                                   FeedbackServerOptions options) {
  size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("bad feedback address ", address));
  }
  Stop();
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), absl::StrCat(port).c_str(), &hints, &res) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot bind ", address));
  }
  for (addrinfo* a = res; a != nullptr && listen_fd_ < 0; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0) {
      listen_fd_ = fd;
    } else {
      close(fd);
    }
  }
  freeaddrinfo(res);
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  if (listen_fd_ < 0 || getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len) != 0 ||
      pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
    Stop();
    return absl::UnavailableError(absl::StrCat("cannot bind ", address));
  }
  port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  handler_ = handler;
  options_ = options;
  rlimit files{};

  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY) {
    max_connections_ = std::clamp<size_t>(files.rlim_cur / 4, 1, kMaxConnections);
  }
  {
    absl::MutexLock lock(&mu_);
    stopping_ = false;
  }
  peak_buffered_ = 0;
  receiver_ = std::thread([this] { Receive(); });
  for (int i = 0; i < options_.workers; ++i) workers_.emplace_back([this] { Work(); });
  return absl::OkStatus();
}

void FeedbackServer::Receive() {
  std::vector<PendingConnection> pending;  // oldest first
  std::vector<pollfd> polled;
  bool poll_failing = false;  // logged once a run
  for (;;) {
    ExpireDeadlines(pending);
    const Clock::time_point now = Clock::now();
    polled.assign({{wake_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}});
    Clock::time_point next = now + std::chrono::seconds(1);
    for (const PendingConnection& p : pending) {
      polled.push_back({p.fd, POLLIN, 0});
      next = std::min(next, p.deadline);
    }
    const int wait_ms = static_cast<int>(
        std::chrono::ceil<std::chrono::milliseconds>(next - now).count());
    if (poll(polled.data(), polled.size(), std::max(wait_ms, 0)) < 0) {
      // Out of kernel memory, say: the endpoint must not stop, so it tries again shortly.
      if (errno != EINTR) {
        if (!poll_failing) LogError("feedback endpoint cannot poll", {{"error", strerror(errno)}});
        poll_failing = true;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      continue;
    }
    poll_failing = false;
    if (polled[0].revents != 0) break;  // Stop()
    // Read what arrived. Connections dropped here are marked (fd -1) and removed after, so the
    // indexes into `polled` hold.
    for (size_t i = 0; i < pending.size(); ++i) {
      PendingConnection& p = pending[i];
      if (polled[i + 2].revents == 0 || p.fd < 0) continue;
      const size_t had = p.data.size();
      if (!ReadInto(p, pending)) continue;
      if (p.body_at == 0 && !TakeHead(p, had)) continue;
      if (p.body_at != 0 && p.data.size() >= p.Needed()) Enqueue(p);
    }
    Sweep(pending);
    if (polled[1].revents != 0) AcceptNew(pending);
  }
  for (PendingConnection& p : pending) {
    if (p.fd >= 0) Drop(p, "");
  }
}

void FeedbackServer::Drop(PendingConnection& p, const std::string& response) {
  if (response.empty()) {
    close(p.fd);
  } else {
    AnswerAndClose(p.fd, response);
  }
  p.fd = -1;
  buffered_ -= p.data.capacity();
  std::vector<char>().swap(p.data);
}

void FeedbackServer::ExpireDeadlines(std::vector<PendingConnection>& pending) {
  const Clock::time_point now = Clock::now();
  for (PendingConnection& p : pending) {
    if (p.deadline <= now) Drop(p, Response({408, "request not received in time"}));
  }
  Sweep(pending);
}

bool FeedbackServer::ReadInto(PendingConnection& p, std::vector<PendingConnection>& pending) {
  char buf[16 * 1024];
  const ssize_t got = recv(p.fd, buf, std::min(sizeof(buf), p.Needed() - p.data.size()), 0);
  if (got < 0 && (errno == EAGAIN || errno == EINTR)) return false;
  if (got <= 0) {  // the client went away before its request was whole
    Drop(p, "");
    return false;
  }
  const size_t capacity = p.CapacityFor(got);
  // Over the budget, the connections holding the most give way (503), so that a small
  // request, as an SNS message is, always finds room.
  while (buffered_ + (capacity - p.data.capacity()) > kMaxBuffered) {
    PendingConnection* largest = &p;
    for (PendingConnection& q : pending) {
      if (q.fd >= 0 && q.data.capacity() > largest->data.capacity()) largest = &q;
    }
    Drop(*largest, Response({503, "busy; retry"}));
    if (largest == &p) break;
  }
  if (p.fd < 0) return false;
  buffered_ += capacity - p.data.capacity();
  peak_buffered_ = std::max(peak_buffered_.load(), buffered_.load());
  p.data.reserve(capacity);
  p.data.insert(p.data.end(), buf, buf + got);
  return true;
}

bool FeedbackServer::TakeHead(PendingConnection& p, size_t had) {
  const absl::string_view data(p.data.data(), p.data.size());
  const size_t end = data.find("\r\n\r\n", had < 3 ? 0 : had - 3);
  // A header line ended by LF alone never ends the headers: refuse it now, not at the
  // timeout. Only the headers are scanned: the body's own line feeds are its business.
  const absl::string_view head_part = data.substr(0, end == absl::string_view::npos ? data.size()
                                                                                    : end + 4);
  for (size_t lf = head_part.find('\n', had); lf != absl::string_view::npos;
       lf = head_part.find('\n', lf + 1)) {
    if (lf == 0 || head_part[lf - 1] != '\r') {
      Drop(p, Response({400, "bad header"}));
      return false;
    }
  }
  if (end == absl::string_view::npos || end > kMaxHead) {
    if (data.size() >= p.Needed()) Drop(p, Response({431, "headers too large"}));
    return false;
  }
  Head head = ParseHead(data.substr(0, end), options_.max_body, options_.allow_get);
  if (head.early.status != 0) {
    Drop(p, Response(head.early, head.extra_headers));
    return false;
  }
  p.body_at = end + 4;
  p.content_length = head.content_length;
  if (head.expect_continue && data.size() < p.Needed()) {
    static constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
    send(p.fd, kContinue, sizeof(kContinue) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  return true;
}

void FeedbackServer::Enqueue(PendingConnection& p) {
  const absl::string_view data(p.data.data(), p.data.size());
  // The head was parsed once already (TakeHead); again here, so that only a request handed on
  // holds its path and headers apart from the connection's buffer.
  Head head = ParseHead(data.substr(0, p.body_at - 4), options_.max_body, options_.allow_get);
  Request r{p.fd,
            {std::move(head.path), std::move(head.headers),
             std::string(data.substr(p.body_at, p.content_length)), std::move(head.method),
             std::move(head.query)}};
  buffered_ += RequestBytes(r.http);
  buffered_ -= p.data.capacity();
  peak_buffered_ = std::max(peak_buffered_.load(), buffered_.load());
  p.fd = -1;  // now the request's
  std::vector<char>().swap(p.data);
  absl::MutexLock lock(&mu_);
  requests_.push_back(std::move(r));  // bounded by max_connections_ with those waiting
}

void FeedbackServer::AcceptNew(std::vector<PendingConnection>& pending) {
  size_t queued;
  {
    absl::MutexLock lock(&mu_);
    queued = requests_.size();
  }
  const size_t held = pending.size() + queued;
  const size_t accepts = (held < max_connections_ ? max_connections_ - held : 0) +
                         kAcceptsBeyondFree;
  const Clock::time_point pass = Clock::now();
  for (size_t i = 0; i < accepts; ++i) {
    // Full: a new connection takes the place of the slowest one already read; when every
    // waiting one was accepted in this pass, the rest wait in the backlog for the next pass.
    auto slowest = pending.end();
    if (pending.size() + queued >= max_connections_ && !pending.empty()) {
      slowest = Slowest(pending, Clock::now(), pass);
      if (slowest == pending.end()) break;
    }
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      // Out of descriptors: the rest of the process needs them more; try again shortly.
      if (errno == EMFILE || errno == ENFILE) absl::SleepFor(absl::Milliseconds(10));
      break;
    }
    const Clock::time_point accepted = Clock::now();
    if (pending.size() + queued >= max_connections_) {
      if (pending.empty()) {  // all wait for a worker
        close(fd);
        continue;
      }
      Drop(*slowest, "");
      pending.erase(slowest);
    }
    pending.push_back(
        {fd, accepted, accepted + absl::ToChronoMilliseconds(options_.request_timeout)});
  }
}

void FeedbackServer::Work() {
  for (;;) {
    Request r;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](FeedbackServer* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) {
            return s->stopping_ || !s->requests_.empty();
          },
          this));
      if (stopping_) return;
      r = std::move(requests_.front());
      requests_.pop_front();
    }
    const HttpReply reply = handler_->Handle(r.http);
    const std::string response = Response(
        reply,
        reply.status == 401 ? "WWW-Authenticate: Basic realm=\"mailroom feedback\"\r\n" : "");
    buffered_ -= RequestBytes(r.http);
    r.http = HttpRequest();
    // The reply is small; a client that does not read it gets the request timeout.
    const int blocking = fcntl(r.fd, F_GETFL) & ~O_NONBLOCK;
    fcntl(r.fd, F_SETFL, blocking);
    const timeval send_timeout = absl::ToTimeval(options_.request_timeout);
    setsockopt(r.fd, SOL_SOCKET, SO_SNDTIMEO, &send_timeout, sizeof(send_timeout));
    send(r.fd, response.data(), response.size(), MSG_NOSIGNAL);
    shutdown(r.fd, SHUT_WR);
    close(r.fd);
  }
}

void FeedbackServer::Stop() {
  if (receiver_.joinable()) {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    const char knock = 1;
    if (write(wake_[1], &knock, 1) < 0) {
      // the pipe is empty and non-blocking: a write fails only if it is already full
    }
    receiver_.join();
    for (std::thread& w : workers_) w.join();
    workers_.clear();
    absl::MutexLock lock(&mu_);
    for (const Request& r : requests_) close(r.fd);
    requests_.clear();
    buffered_ = 0;
  }
  for (int* fd : {&listen_fd_, &wake_[0], &wake_[1]}) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
  }
  port_ = 0;
}

}  // namespace mailroom
