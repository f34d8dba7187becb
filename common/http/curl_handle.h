#pragma once

#include <curl/curl.h>

#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace mailroom {

// RAII owners for libcurl objects.
struct CurlDeleter {
  void operator()(CURL* c) const { curl_easy_cleanup(c); }
};
struct CurlSlistDeleter {
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};
using CurlHandle = std::unique_ptr<CURL, CurlDeleter>;
using CurlSlist = std::unique_ptr<curl_slist, CurlSlistDeleter>;

// Initialises libcurl once per process (thread-safe).
void CurlGlobalInit();

// A fixed set of easy handles shared by the threads of one transport (as google-cloud-cpp's
// pooled CurlHandleFactory): each handle keeps its connection (SMTP session, HTTP keep-alive)
// between transfers, so `size` handles mean at most `size` connections. Acquire() blocks until
// a handle is free and hands it out reset (curl_easy_reset keeps the connection, drops the
// options of the last transfer). Handles run through a CurlMultiLoop leave their connections
// in the loop's cache instead; the pool then bounds the transfers, hence the connections, in
// use at once. Thread-safe; the pool must outlive its loans.
class CurlHandlePool {
 public:
  // A handle on loan; returned to the pool when destroyed. Movable, not copyable.
  class Loan {
   public:
    Loan(Loan&& other) noexcept : pool_(other.pool_), handle_(other.handle_), index_(other.index_) {
      other.pool_ = nullptr;
    }
    Loan& operator=(Loan&&) = delete;
    ~Loan() {
      if (pool_ != nullptr) pool_->Release(index_);
    }
    CURL* get() const { return handle_; }
    // The handle's place in the pool, 0 to size() - 1, the same at every loan of that handle:
    // lets a caller keep state per handle.
    int index() const { return index_; }

   private:
    friend class CurlHandlePool;
    Loan(CurlHandlePool* pool, CURL* handle, int index)
        : pool_(pool), handle_(handle), index_(index) {}
    CurlHandlePool* pool_;
    CURL* handle_;
    int index_;
  };

  // `size` handles (at least 1), created now.
  explicit CurlHandlePool(int size);
  CurlHandlePool(const CurlHandlePool&) = delete;
  CurlHandlePool& operator=(const CurlHandlePool&) = delete;

  // Blocks until a handle is free.
  Loan Acquire();
  int size() const { return static_cast<int>(handles_.size()); }
  // Handles on loan now (for tests and metrics).
  int in_use() const;

 private:
  void Release(int index);

  std::vector<CurlHandle> handles_;  // fixed after construction
  mutable absl::Mutex mu_;
  std::vector<int> free_ ABSL_GUARDED_BY(mu_);  // indexes into handles_
};

}  // namespace mailroom
