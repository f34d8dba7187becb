#include "collector/console/sessions.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include <algorithm>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/string_view.h"

namespace mailroom {

std::string RandomHex(size_t bytes) {
  std::vector<unsigned char> b(bytes);
  if (RAND_bytes(b.data(), static_cast<int>(b.size())) != 1) return "";
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<char*>(b.data()), b.size()));
}

namespace {

// Sessions are kept by the SHA-256 of their id, so that looking one up compares digests an
// attacker cannot choose, never the id presented byte by byte.
std::string Key(const std::string& id) {
  unsigned char d[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(id.data()), id.size(), d);
  return std::string(reinterpret_cast<char*>(d), sizeof d);
}

}  // namespace

std::string ConsoleSessions::Begin(const Principal& principal) {
  const absl::Time now = clock_->Now();
  std::string id = RandomHex(32);
  std::string csrf = RandomHex(16);
  if (id.empty() || csrf.empty()) return "";  // no randomness: no session
  absl::MutexLock lock(&mu_);
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    it = it->second.expires <= now ? sessions_.erase(it) : std::next(it);
  }
  // A credential's own sessions make room for its new one; nobody else's are ended.
  auto mine = [&](const auto& kv) {
    return kv.second.principal.credential == principal.credential;
  };
  while (static_cast<size_t>(std::count_if(sessions_.begin(), sessions_.end(), mine)) >=
         kPerCredential) {
    auto oldest = sessions_.end();
    for (auto it = sessions_.begin(); it != sessions_.end(); ++it) {
      if (mine(*it) && (oldest == sessions_.end() || it->second.expires < oldest->second.expires)) {
        oldest = it;
      }
    }
    sessions_.erase(oldest);
  }
  if (sessions_.size() >= capacity_) return "";  // full: refused, nobody signed out
  sessions_[Key(id)] = ConsoleSession{principal, std::move(csrf), now + ttl_};
  return id;
}

std::optional<ConsoleSession> ConsoleSessions::Find(const std::string& id) {
  if (id.size() != 64) return std::nullopt;
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(Key(id));
  if (it == sessions_.end()) return std::nullopt;
  if (it->second.expires <= clock_->Now()) {
    sessions_.erase(it);
    return std::nullopt;
  }
  return it->second;
}

void ConsoleSessions::End(const std::string& id) {
  absl::MutexLock lock(&mu_);
  sessions_.erase(Key(id));
}

size_t ConsoleSessions::size() const {
  absl::MutexLock lock(&mu_);
  return sessions_.size();
}

}  // namespace mailroom
