#include "collector/api/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace mailroom {
namespace {

std::string Sha256(absl::string_view s) {
  unsigned char out[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(s.data()), s.size(), out);
  return std::string(reinterpret_cast<char*>(out), sizeof out);
}

// The roles in `roles` by their configuration names, joined by `joiner`.
std::string RoleNames(unsigned roles, absl::string_view joiner) {
  std::vector<absl::string_view> names;
  if (roles & kRoleSubscriber) names.push_back("sender");
  if (roles & kRoleObserver) names.push_back("observer");
  if (roles & kRoleOperator) names.push_back("operator");
  if (names.empty()) return "no";
  return absl::StrJoin(names, joiner);
}

// 16 hex digits of SHA-256 over the parts, each preceded by its length (no two lists of parts
// hash alike).
std::string Tag(std::initializer_list<absl::string_view> parts) {
  std::string msg;
  for (absl::string_view p : parts) absl::StrAppend(&msg, p.size(), ":", p);
  return absl::BytesToHexString(Sha256(msg).substr(0, 8));
}

bool IsHex(absl::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// The Feistel network's round function: 32 bits of HMAC-SHA256(binding, label, round, half).
uint32_t Round(const Principal& p, int round, uint32_t half) {
  unsigned char msg[16] = {'g', 'r', 'a', 'n', 't', '-',
                           'i', 'd', 0,   0,   0,   static_cast<unsigned char>(round)};
  for (int i = 0; i < 4; ++i) msg[12 + i] = static_cast<unsigned char>(half >> (8 * i));
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  HMAC(EVP_sha256(), p.binding.data(), static_cast<int>(p.binding.size()), msg, sizeof msg, out,
       &n);
  return static_cast<uint32_t>(out[0]) | static_cast<uint32_t>(out[1]) << 8 |
         static_cast<uint32_t>(out[2]) << 16 | static_cast<uint32_t>(out[3]) << 24;
}

constexpr int kGrantIdRounds = 4;

}  // namespace

uint64_t SealGrantId(const Principal& principal, uint64_t id) {
  if (id == 0) return 0;
  uint32_t l = static_cast<uint32_t>(id >> 32), r = static_cast<uint32_t>(id);
  for (int i = 0; i < kGrantIdRounds; ++i) {
    const uint32_t next = l ^ Round(principal, i, r);
    l = r;
    r = next;
  }
  return static_cast<uint64_t>(l) << 32 | r;
}

uint64_t OpenGrantId(const Principal& principal, uint64_t sealed) {
  if (sealed == 0) return 0;
  uint32_t l = static_cast<uint32_t>(sealed >> 32), r = static_cast<uint32_t>(sealed);
  for (int i = kGrantIdRounds - 1; i >= 0; --i) {
    const uint32_t prev = r ^ Round(principal, i, l);
    r = l;
    l = prev;
  }
  return static_cast<uint64_t>(l) << 32 | r;
}

std::string NewSubscriptionId(const Principal& principal) {
  unsigned char b[16];
  RAND_bytes(b, sizeof b);
  const std::string random = absl::BytesToHexString(
      absl::string_view(reinterpret_cast<char*>(b), sizeof b));
  return absl::StrCat("sub-", random, "-", Tag({"subscription", principal.binding, random}));
}

bool IsSubscriptionId(absl::string_view id) {
  return absl::ConsumePrefix(&id, "sub-") && id.size() == 32 + 1 + 16 && id[32] == '-' &&
         IsHex(id.substr(0, 32)) && IsHex(id.substr(33));
}

bool SubscriptionIsFor(absl::string_view id, const Principal& principal) {
  if (!IsSubscriptionId(id)) return false;
  id.remove_prefix(4);
  const std::string expected = Tag({"subscription", principal.binding, id.substr(0, 32)});
  return CRYPTO_memcmp(expected.data(), id.data() + 33, expected.size()) == 0;
}

std::string BoundHolder(const Principal& principal, absl::string_view holder) {
  return absl::StrCat(holder, "~", Tag({"holder", principal.binding}));
}

bool Principal::InGroup(absl::string_view group) const {
  return all_groups || std::find(groups.begin(), groups.end(), group) != groups.end();
}

absl::StatusOr<std::vector<Credential>> ParseCredentials(const std::vector<std::string>& entries,
                                                         absl::string_view variable) {
  std::vector<Credential> out;
  absl::flat_hash_map<std::string, size_t> seen;  // digest -> entry number
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string where = absl::StrCat(variable, ": entry ", i + 1, " of ", entries.size());
    absl::string_view entry = entries[i];
    Credential c;
    const size_t at = entry.rfind('@');
    if (at == absl::string_view::npos) {
      c.token = std::string(entry);
      c.principal = Principal::Everything();
      c.principal.legacy = true;
      c.legacy = true;
    } else {
      c.token = std::string(entry.substr(0, at));
      absl::string_view scope = entry.substr(at + 1);
      const size_t colon = scope.find(':');
      if (colon == absl::string_view::npos ||
          scope.find(':', colon + 1) != absl::string_view::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": the scope after the last '@' must be GROUPS:ROLE (for example "
                                "TOKEN@mailroom:subscriber or TOKEN@*:operator)"));
      }
      absl::string_view groups = scope.substr(0, colon);
      absl::string_view roles = scope.substr(colon + 1);
      if (groups == "*") {
        c.principal.all_groups = true;
      } else {
        int n = 0;
        for (absl::string_view g : absl::StrSplit(groups, '+')) {
          ++n;
          if (!ValidGroupName(g)) {
            return absl::InvalidArgumentError(
                absl::StrCat(where, ": group ", n,
                             " is not `*` or a consumer group name "
                             "(^[a-z][a-z0-9_-]{0,62}$, several joined by '+')"));
          }
          if (!c.principal.InGroup(g)) c.principal.groups.emplace_back(g);
        }
      }
      for (absl::string_view r : absl::StrSplit(roles, '+')) {
        if (r == "sender" || r == "subscriber") {
          c.principal.roles |= kRoleSubscriber;
          c.subscriber_named |= r == "subscriber";
        } else if (r == "observer") {
          c.principal.roles |= kRoleObserver;
        } else if (r == "operator") {
          c.principal.roles |= kRoleOperator;
        } else {
          return absl::InvalidArgumentError(absl::StrCat(
              where, ": the role after ':' must be sender, observer or operator, or two of "
                     "them joined by '+' (subscriber is the former name of sender)"));
        }
      }
      // An observer is the credential that receives no tokens: with the sender role too it
      // would receive them.
      if (c.principal.HasRole(kRoleSubscriber) && c.principal.HasRole(kRoleObserver)) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": sender (or subscriber) and observer exclude each other: a sender "
                   "receives the signed tokens, an observer never does"));
      }
    }
    if (c.token.size() < 16) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": the token must be at least 16 characters"));
    }
    auto [it, inserted] = seen.emplace(Sha256(c.token), i + 1);
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": the same token as entry ",
                                                     it->second, " (give each token one scope)"));
    }
    out.push_back(std::move(c));
  }
  return out;
}

Authenticator::Authenticator(const std::vector<Credential>& credentials, bool allow_anonymous)
    : allow_anonymous_(allow_anonymous) {
  for (const auto& c : credentials) {
    digests_.push_back(Sha256(c.token));
    principals_.push_back(c.principal);
    principals_.back().credential = absl::StrCat("token ", principals_.size());
    principals_.back().binding = digests_.back();
  }
}

grpc::Status Authenticator::Authenticate(const grpc::ServerContextBase& context,
                                         Principal* principal) const {
  if (digests_.empty()) {
    if (allow_anonymous_) {
      *principal = Principal::Everything();
      // Under mutual TLS the transport has checked the client's certificate: name it.
      auto auth = context.auth_context();
      if (auth != nullptr && auth->IsPeerAuthenticated()) {
        const std::vector<grpc::string_ref> ids = auth->GetPeerIdentity();
        if (!ids.empty()) {
          principal->credential = absl::StrCat("client certificate ",
                                               absl::string_view(ids[0].data(), ids[0].size()));
          principal->binding = principal->credential;
        }
      }
      return grpc::Status::OK;
    }
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "no subscriber credentials configured");
  }
  const auto& md = context.client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "missing \"authorization: Bearer <token>\" metadata");
  }
  absl::string_view value(it->second.data(), it->second.size());
  constexpr absl::string_view kPrefix = "Bearer ";
  if (!absl::StartsWithIgnoreCase(value, kPrefix)) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "authorization metadata is not a Bearer token");
  }
  return AuthenticateToken(value.substr(kPrefix.size()), principal);
}

grpc::Status Authenticator::AuthenticateToken(absl::string_view token, Principal* principal) const {
  if (digests_.empty()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "no subscriber credentials configured");
  }
  const std::string digest = Sha256(token);
  // Every digest is compared; the matching index is selected with a mask, not a branch.
  // Tokens are distinct (ParseCredentials), so at most one matches.
  size_t match = 0;
  size_t matches = 0;
  for (size_t i = 0; i < digests_.size(); ++i) {
    const size_t hit = static_cast<size_t>(
        CRYPTO_memcmp(digests_[i].data(), digest.data(), digest.size()) == 0);
    match |= (0 - hit) & i;
    matches |= hit;
  }
  if (matches == 0) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "invalid bearer token");
  }
  *principal = principals_[match];
  return grpc::Status::OK;
}

bool Authenticator::SenderServes(absl::string_view group) const {
  if (principals_.empty()) return true;
  return std::any_of(principals_.begin(), principals_.end(), [&](const Principal& p) {
    return p.HasRole(kRoleSubscriber) && p.InGroup(group);
  });
}

absl::Status CheckObserversApart(const std::vector<Credential>& credentials,
                                 absl::string_view variable) {
  for (size_t i = 0; i < credentials.size(); ++i) {
    const Principal& observer = credentials[i].principal;
    if (!observer.HasRole(kRoleObserver)) continue;
    for (size_t j = 0; j < credentials.size(); ++j) {
      const Principal& sender = credentials[j].principal;
      if (!sender.HasRole(kRoleSubscriber)) continue;
      std::string shared;
      if (observer.all_groups) {
        if (sender.all_groups) shared = "every consumer group (`*`)";
      } else {
        for (const std::string& g : observer.groups) {
          if (sender.InGroup(g)) {
            shared = absl::StrCat("consumer group \"", g, "\"");
            break;
          }
        }
      }
      if (shared.empty()) continue;
      const char* what = credentials[j].legacy ? "an unscoped token (a sender of every group)"
                         : sender.all_groups   ? "a sender credential of every group (`*`)"
                                               : "a sender credential";
      return absl::InvalidArgumentError(absl::StrCat(
          variable, ": entry ", i + 1, " of ", credentials.size(), " is an observer of ", shared,
          ", which entry ", j + 1, ", ", what,
          ", serves; an observer there would take a share of the senders' jobs: give the "
          "observer a group of its own (TOKEN@audit:observer) and scope each sender to the "
          "groups it sends for"));
    }
  }
  return absl::OkStatus();
}

grpc::Status CheckScope(const Principal& p, unsigned roles, absl::string_view group,
                        absl::string_view method) {
  if (!p.HasRole(roles)) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        absl::StrCat(method, " needs the ", RoleNames(roles, " or "),
                                     " role; this credential has the ", RoleNames(p.roles, "+"),
                                     " role"));
  }
  if (!group.empty() && !p.InGroup(group)) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        absl::StrCat("this credential may not use consumer group \"", group, "\""));
  }
  return grpc::Status::OK;
}

}  // namespace mailroom
