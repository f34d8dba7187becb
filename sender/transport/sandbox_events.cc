#include "sender/transport/sandbox_events.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/backoff.h"
#include "common/log.h"
#include "sender/transport/http_call.h"
#include "sender/transport/http_transport.h"

namespace mailroom {

SandboxEventPoster::SandboxEventPoster(SandboxPosterOptions options, Clock* clock)
    : options_(std::move(options)), clock_(clock), curl_((CurlGlobalInit(), curl_easy_init())),
      worker_([this] { Run(); }, clock) {
  worker_.Start();
}

SandboxEventPoster::~SandboxEventPoster() { Stop(); }

void SandboxEventPoster::Post(SandboxEvent event, absl::Duration extra) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return;
  std::string id = event.id;
  queue_.push({clock_->Now() + options_.delay + extra, seq_++, 0, std::move(event), std::move(id)});
  worker_.Wake();  // its wait is until the earliest event's time, which this may move
}

void SandboxEventPoster::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;  // no Post queues anything from here on
  }
  worker_.Stop();
  absl::MutexLock lock(&mu_);
  if (!queue_.empty()) {
    LogInfo("sandbox events dropped at stop", {{"events", absl::StrCat(queue_.size())}});
    counts_.dropped += queue_.size();
    while (!queue_.empty()) queue_.pop();
  }
}

SandboxEventPoster::Counts SandboxEventPoster::counts() const {
  absl::MutexLock lock(&mu_);
  return counts_;
}

bool SandboxEventPoster::WaitIdle(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return queue_.empty() && !busy_; };
  return mu_.AwaitWithTimeout(absl::Condition(&idle), timeout);
}

absl::Duration SandboxEventPoster::Backoff(int attempt) const {
  return ExponentialDelay(std::max(options_.delay, absl::Milliseconds(250)), options_.max_backoff,
                          attempt);
}

void SandboxEventPoster::Run() {
  for (;;) {
    absl::Time due;
    {
      absl::MutexLock lock(&mu_);
      due = queue_.empty() ? absl::InfiniteFuture() : queue_.top().due;
    }
    // Until the earliest event's time, a Post (which may bring an earlier one) or Stop().
    if (!worker_.WaitUntil(due)) return;
    absl::MutexLock lock(&mu_);
    if (queue_.empty() || queue_.top().due > clock_->Now()) continue;
    Pending p = queue_.top();
    queue_.pop();
    busy_ = true;
    mu_.Unlock();
    ++p.attempt;
    const Answer answer = PostOnce(p);
    mu_.Lock();
    busy_ = false;
    ++counts_.posts;
    if (answer == Answer::kDone) {
      ++counts_.answered;
      continue;
    }
    if (answer == Answer::kDrop || p.attempt >= options_.max_attempts) {
      ++counts_.dropped;
      if (answer != Answer::kDrop) {
        LogWarn("sandbox event dropped", {{"event", p.event.id}, {"reason", "out of attempts"}});
      }
      continue;
    }
    // After an "unmatched" the collector holds the event's id as seen: the next post is a new
    // event to it (`id`.N for the N-th post).
    if (answer == Answer::kRetryNewId) p.post_id = absl::StrCat(p.event.id, ".", p.attempt + 1);
    p.due = clock_->Now() + Backoff(p.attempt);
    p.seq = seq_++;
    queue_.push(std::move(p));
  }
}

SandboxEventPoster::Answer SandboxEventPoster::PostOnce(const Pending& p) {
  const std::string& id = p.post_id;
  const int64_t timestamp = absl::ToUnixSeconds(absl::Now());
  OutboundRequest request;
  request.url = options_.url;
  request.body = p.event.body;
  request.headers = {
      absl::StrCat("webhook-id: ", id), absl::StrCat("webhook-timestamp: ", timestamp),
      absl::StrCat("webhook-signature: ",
                   HttpTransport::Signature(options_.keys, id, timestamp, request.body))};
  request.connect_timeout = options_.connect_timeout;
  request.timeout = options_.timeout;
  curl_easy_reset(curl_.get());
  auto answer = PerformHttp(curl_.get(), request, nullptr);
  if (!answer.ok()) {
    LogInfo("sandbox event not posted; retrying",
            {{"event", id}, {"error", std::string(answer.status().message())}});
    return Answer::kRetrySameId;
  }
  const std::string said(absl::StripAsciiWhitespace(answer->body.substr(0, 100)));
  if (answer->status == 200) {
    if (said == "unmatched") {
      Log(LogLevel::kDebug, "sandbox event unmatched; retrying", {{"event", id}});
      return Answer::kRetryNewId;
    }
    Log(LogLevel::kDebug, "sandbox event posted", {{"event", id}, {"result", said}});
    return Answer::kDone;
  }
  if (answer->status == 408 || answer->status == 429 || answer->status >= 500) {
    LogInfo("sandbox event refused for now; retrying",
            {{"event", id}, {"status", absl::StrCat(answer->status)}});
    return Answer::kRetrySameId;
  }
  LogWarn("sandbox event dropped",
          {{"event", id}, {"status", absl::StrCat(answer->status)}, {"reason", ReasonText(said)}});
  return Answer::kDrop;
}

}  // namespace mailroom
