#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "collector/api/auth.h"
#include "common/clock.h"

namespace mailroom {

// A signed-in operator of the console.
struct ConsoleSession {
  Principal principal;
  std::string csrf;  // the token every form of the session carries (128 random bits, hex)
  absl::Time expires;
};

// The console's sessions, in this collector's memory: each a random id (256 bits, hex: the
// cookie's value; kept by its SHA-256) naming who signed in, with a CSRF token of its own, valid
// for `ttl` after it began. A credential holds at most kPerCredential at once (a new one ends
// its own oldest), and at most `capacity` live in all: beyond that a sign-in is refused, and
// nobody else's session ends. Thread-safe; `clock` must outlive it.
class ConsoleSessions {
 public:
  // A session lasts a working day; a collector keeps at most this many.
  static constexpr absl::Duration kDefaultTtl = absl::Hours(8);
  static constexpr size_t kDefaultCapacity = 1000;
  static constexpr size_t kPerCredential = 20;

  ConsoleSessions(absl::Duration ttl, size_t capacity, Clock* clock)
      : ttl_(ttl), capacity_(capacity), clock_(clock) {}

  // A new session for `principal`; returns its id, or "" when it is refused (every place
  // taken by other credentials' sessions, or no randomness from OpenSSL).
  std::string Begin(const Principal& principal);
  // The live session `id` names, if any (an expired one is ended).
  std::optional<ConsoleSession> Find(const std::string& id);
  void End(const std::string& id);
  size_t size() const;
  absl::Duration ttl() const { return ttl_; }

 private:
  const absl::Duration ttl_;
  const size_t capacity_;
  Clock* const clock_;
  mutable absl::Mutex mu_;
  std::map<std::string, ConsoleSession> sessions_ ABSL_GUARDED_BY(mu_);
};

// `bytes` random bytes from OpenSSL's generator, in hex; "" when it has none to give.
std::string RandomHex(size_t bytes);

}  // namespace mailroom
