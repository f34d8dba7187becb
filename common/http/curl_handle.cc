#include "common/http/curl_handle.h"

#include <algorithm>
#include <mutex>

namespace mailroom {

void CurlGlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

CurlHandlePool::CurlHandlePool(int size) {
  CurlGlobalInit();
  for (int i = 0; i < std::max(1, size); ++i) handles_.emplace_back(curl_easy_init());
  absl::MutexLock lock(&mu_);
  // Handed out last-in first-out: a recently used handle is the likeliest to be connected.
  for (int i = static_cast<int>(handles_.size()) - 1; i >= 0; --i) free_.push_back(i);
}

CurlHandlePool::Loan CurlHandlePool::Acquire() {
  absl::MutexLock lock(&mu_);
  auto any_free = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !free_.empty(); };
  mu_.Await(absl::Condition(&any_free));
  const int index = free_.back();
  free_.pop_back();
  CURL* c = handles_[index].get();
  curl_easy_reset(c);
  return Loan(this, c, index);
}

void CurlHandlePool::Release(int index) {
  absl::MutexLock lock(&mu_);
  free_.push_back(index);
}

int CurlHandlePool::in_use() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(handles_.size() - free_.size());
}

}  // namespace mailroom
