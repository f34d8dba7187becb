#include "sender/pacing/grant_pacer.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace mailroom {
namespace {

int Index(SendClass c) { return c == SendClass::kRecovery ? 0 : 1; }

}  // namespace

GrantPacer::GrantPacer(GrantPacerOptions options, BudgetClient* client, std::vector<Pacer*> caps,
                       Clock* clock)
    : opt_(std::move(options)), client_(client), caps_(std::move(caps)), clock_(clock),
      backoff_(opt_.initial_backoff, opt_.max_backoff), worker_([this] { Run(); }, clock) {}

GrantPacer::~GrantPacer() { Stop(); }

int64_t GrantPacer::PriceNow() const {
  if (!opt_.price_now) return opt_.price_micros;
  return std::max(opt_.price_micros, opt_.price_now());
}

GrantPacer::Held* GrantPacer::FindLocked(SendClass c, absl::Time now, int64_t price) {
  for (Held& h : grants_) {
    if (h.left > 0 && now < h.usable_until && h.price >= price &&
        (c == SendClass::kRecovery || !h.recovery)) {
      return &h;
    }
  }
  return nullptr;
}

bool GrantPacer::LowLocked(SendClass c, absl::Time now, int64_t price) {
  int usable = 0;
  for (const Held& h : grants_) {
    if (now < h.usable_until && h.price >= price && (c == SendClass::kRecovery || !h.recovery)) {
      usable += h.left;
    }
  }
  return usable < std::max(1, last_grant_ / 4);
}

void GrantPacer::WantLocked(SendClass c) {
  const int i = Index(c);
  want_[i] = true;
  if (clock_->Now() >= next_ask_[i]) worker_.Wake();
}

absl::Time GrantPacer::NextSendTime(SendClass c) {
  const int64_t price = PriceNow();
  const absl::Time now = clock_->Now();
  {
    absl::MutexLock lock(&mu_);
    if (FindLocked(c, now, price) == nullptr) {
      WantLocked(c);
      const absl::Time ask = next_ask_[Index(c)];
      // Paced or spent: the collector said when to ask again. Otherwise a request is on its
      // way; look again shortly.
      return ask > now ? ask : now + absl::Milliseconds(10);
    }
  }
  absl::Time next = now;
  for (Pacer* cap : caps_) next = std::max(next, cap->NextSendTime(c));
  return next;
}

int64_t GrantPacer::TryAcquire(SendClass c) {
  const int64_t price = PriceNow();
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  Held* h = FindLocked(c, now, price);
  if (h == nullptr) {
    WantLocked(c);
    return -1;
  }
  for (size_t i = 0; i < caps_.size(); ++i) {
    if (caps_[i]->TryAcquire(c) < 0) {
      while (i > 0) caps_[--i]->Refund(c);  // all or nothing
      return -1;
    }
  }
  --h->left;
  ++h->taken;
  const int64_t cost = h->price;
  // Ask for the next grant before this one runs out.
  if (LowLocked(c, now, price)) WantLocked(c);
  return cost;
}

void GrantPacer::Refund(SendClass c) {
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  RefundLocked(c, now, -1);
}

void GrantPacer::Refund(SendClass c, int64_t cost) {
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  RefundLocked(c, now, cost);
}

void GrantPacer::RefundLocked(SendClass c, absl::Time now, int64_t cost) {
  // Back into the newest live grant of that price that gave one out (never into a grant of
  // another price: a slot bought cheap must not come back as a dear one); a grant already
  // returned or expired keeps it (charged, never sent: the safe side).
  for (auto it = grants_.rbegin(); it != grants_.rend(); ++it) {
    if (it->taken > 0 && now < it->usable_until && (cost < 0 || it->price == cost) &&
        (c == SendClass::kRecovery || !it->recovery)) {
      --it->taken;
      ++it->left;
      break;
    }
  }
  for (Pacer* cap : caps_) cap->Refund(c);
}

void GrantPacer::Tick() {
  absl::MutexLock call(&call_mu_);
  const int64_t price = PriceNow();
  const absl::Time now = clock_->Now();
  int ask = -1;
  int emails = opt_.max_request;
  {
    absl::MutexLock lock(&mu_);
    if (std::isinf(pace_)) emails = opt_.max_request_unlimited;
    for (SendClass c : {SendClass::kRecovery, SendClass::kStandard}) {
      const int i = Index(c);
      if (want_[i] && now >= next_ask_[i] && LowLocked(c, now, price)) {
        ask = i;
        break;
      }
    }
    if (ask >= 0) want_[ask] = false;
  }
  if (ask >= 0) {
    const bool recovery = ask == 0;
    auto r = client_->Acquire(emails, recovery, price);
    const absl::Time after = clock_->Now();
    absl::MutexLock lock(&mu_);
    if (!r.ok()) {
      const absl::Duration delay = backoff_.NextBackOff();
      LogWarn("budget grant failed",
              {{"error", std::string(r.status().message())},
               {"retry_in_ms", absl::StrCat(absl::ToInt64Milliseconds(delay))}});
      next_ask_[ask] = after + delay;
    } else {
      backoff_.Reset();
      pace_ = r->pace_per_second();
      if (r->emails() > 0) {
        Held h;
        h.id = r->grant_id();
        h.left = static_cast<int>(r->emails());
        h.recovery = recovery;
        h.price = price;
        // Measured from before the request: the collector's clock started the lease later.
        h.usable_until = now + absl::Milliseconds(r->expires_in_ms()) - opt_.expiry_margin;
        grants_.push_back(h);
        granted_ += h.left;
        last_grant_ = h.left;
        exhausted_[ask] = false;
        next_ask_[ask] = absl::InfinitePast();
      } else {
        next_ask_[ask] = after + absl::Milliseconds(std::max<int64_t>(1, r->retry_after_ms()));
        if (r->exhausted() && !exhausted_[ask]) {
          LogWarn("group budget spent for this month; holding jobs",
                  {{"class", recovery ? "recovery" : "standard"}});
        }
        exhausted_[ask] = r->exhausted();
      }
    }
  }
  // Give back what expiring grants did not use; forget them.
  std::vector<std::pair<uint64_t, int>> unused;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time t = clock_->Now();
    while (!grants_.empty()) {
      auto it = std::find_if(grants_.begin(), grants_.end(),
                             [t](const Held& h) { return t >= h.usable_until; });
      if (it == grants_.end()) break;
      if (it->left > 0) unused.emplace_back(it->id, it->left);
      grants_.erase(it);
    }
  }
  for (const auto& [id, n] : unused) {
    auto r = client_->Return(id, n);
    if (!r.ok()) {
      // Not returned: it stays charged, which never overspends.
      LogWarn("budget return failed", {{"error", std::string(r.status().message())}});
      continue;
    }
    absl::MutexLock lock(&mu_);
    returned_ += *r;
  }
}

void GrantPacer::Run() {
  while (worker_.WaitFor(absl::Milliseconds(200))) Tick();
}

void GrantPacer::Start() { worker_.Start(); }

void GrantPacer::Stop() {
  {
    absl::MutexLock lock(&mu_);
    // Everything unused goes back now: expire all grants for the final Tick.
    for (Held& h : grants_) h.usable_until = absl::InfinitePast();
    want_[0] = want_[1] = false;
  }
  worker_.Stop();
  Tick();
}

double GrantPacer::pace_per_second() {
  absl::MutexLock lock(&mu_);
  return pace_;
}

int64_t GrantPacer::held_emails() {
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  int64_t n = 0;
  for (const Held& h : grants_) {
    if (now < h.usable_until) n += h.left;
  }
  return n;
}

int64_t GrantPacer::granted_emails() {
  absl::MutexLock lock(&mu_);
  return granted_;
}

int64_t GrantPacer::returned_emails() {
  absl::MutexLock lock(&mu_);
  return returned_;
}

bool GrantPacer::exhausted() {
  absl::MutexLock lock(&mu_);
  return exhausted_[0] || exhausted_[1];
}

}  // namespace mailroom
