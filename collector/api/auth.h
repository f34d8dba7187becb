#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/names.h"
#include "grpcpp/grpcpp.h"

namespace mailroom {

// What a credential may do. A bit set: a credential may hold several roles (never both
// kRoleSubscriber and kRoleObserver).
enum Role : unsigned {
  // The sender role (`sender`, formerly `subscriber`): Subscribe and receive jobs *with* their
  // signed tokens and codes, Acknowledge, RenewLeases, GetUsage, AcquireBudget, ReturnBudget.
  kRoleSubscriber = 1,
  // GetQueueStats, ListFailures, Requeue, GetUsage, GetGroupBudget, SetGroupBudget.
  kRoleOperator = 2,
  // `observer`: Subscribe and receive jobs *without* token and code, Acknowledge and
  // RenewLeases its own subscriptions' leases (outcomes without cost or suppression),
  // GetUsage. No budget calls, no budget_holder: an observer sends nothing.
  kRoleObserver = 4,
};
inline constexpr unsigned kAllRoles = kRoleSubscriber | kRoleOperator;
// The roles that may subscribe, acknowledge and renew leases.
inline constexpr unsigned kSubscribingRoles = kRoleSubscriber | kRoleObserver;

// Who is calling, once authenticated: its roles and the consumer groups it may use.
struct Principal {
  unsigned roles = 0;       // Role bits
  bool all_groups = false;  // `*`
  std::vector<std::string> groups;
  // Which credential this is, for per-credential limits and logs (never secret): "token N"
  // (the entry's position in MAILROOM_SUBSCRIBER_TOKENS), "client certificate <identity>"
  // under mutual TLS without tokens, or "anonymous".
  std::string credential{};
  // What subscriptions and grant holders are bound to (NewSubscriptionId, BoundHolder): the
  // token's SHA-256 digest, else `credential`. The same on every collector with the same
  // credentials, whatever their order. Derived from a secret: never logged or shown.
  std::string binding{};
  // An unscoped token of MAILROOM_SUBSCRIBER_TOKENS (deprecated; every role, every group): the
  // console's sign-in refuses it, asking for a token scoped `:operator`.
  bool legacy = false;

  // Full access: legacy unscoped tokens, mutual TLS and the anonymous development mode.
  static Principal Everything() { return {kAllRoles, true, {}, "anonymous", "anonymous"}; }
  bool HasRole(unsigned any_of) const { return (roles & any_of) != 0; }
  // Whether the jobs this credential subscribes to carry their signed tokens and codes: only
  // with the sender role. Every other credential that may subscribe (an observer) gets them
  // without.
  bool ReceivesSecrets() const { return HasRole(kRoleSubscriber); }
  bool InGroup(absl::string_view group) const;
};

// A new subscription id issued to `principal`: "sub-", 32 hex digits (128 random bits), "-",
// and 16 hex digits that bind it to the credential. Only the credential that subscribed may
// acknowledge or renew the subscription's leases (SubscriptionIsFor), on any collector.
std::string NewSubscriptionId(const Principal& principal);
// Whether `id` has the form NewSubscriptionId gives (whoever it was issued to). Ids of an
// earlier form ("sub-" and 18 hex digits) were bound to no credential: they are not
// subscription ids any more (the holder subscribes again and gets a bound one).
bool IsSubscriptionId(absl::string_view id);
// Whether `id` names a subscription of `principal`.
bool SubscriptionIsFor(absl::string_view id, const Principal& principal);
// A grant holder as stored (budget_grants.holder, budget_subscriptions.holder): `holder` as
// the sender named it, "~" and 16 hex digits of the credential. Another credential naming the
// same holder string names another holder: it can neither return nor be refunded its grants.
std::string BoundHolder(const Principal& principal, absl::string_view holder);

// Grant ids as a credential sees them: the database's sequential id (budget_grants.id) under
// a permutation of the 64-bit values keyed by the credential (a 4-round Feistel network over
// HMAC-SHA256), so grant ids are neither sequential nor guessable from one's own. OpenGrantId
// inverts SealGrantId for the same credential; another credential's sealed id opens to an
// unrelated id (which its holder binding then refuses). 0 (no grant) stays 0.
uint64_t SealGrantId(const Principal& principal, uint64_t id);
uint64_t OpenGrantId(const Principal& principal, uint64_t sealed);

// One configured bearer token and what it grants. `token` is a secret: never print it.
struct Credential {
  std::string token;
  Principal principal;
  bool legacy = false;  // an entry without a scope (full access; deprecated)
  // The entry names the sender role by its former name `subscriber` (it receives tokens and
  // codes; main logs a warning asking for `sender` or `observer`).
  bool subscriber_named = false;
};

// Parses MAILROOM_SUBSCRIBER_TOKENS (already split at commas and trimmed). Each entry is either
//   TOKEN                      legacy: every role, every group (deprecated)
//   TOKEN@GROUPS:ROLES         GROUPS is `*` or group names joined by `+`;
//                              ROLES is `sender`, `observer` or `operator`, or two of them
//                              joined by `+` (never `sender+observer`); `subscriber` is the
//                              former name of `sender` and means the same.
// The scope follows the *last* `@`, so a token may itself contain `@`. Tokens are at least 16
// characters and distinct. Errors start with `variable`, name the entry by its position (1-based)
// and never contain any part of an entry (a malformed scope may really be part of a token).
absl::StatusOr<std::vector<Credential>> ParseCredentials(const std::vector<std::string>& entries,
                                                         absl::string_view variable);

// OK unless an observer credential and a sender credential (legacy unscoped tokens
// included) are certainly scoped to a common consumer group: the observer names a group the
// sender names or serves by `*`, or both are `*`. In a sender's group an observer would take a
// share of the jobs that the senders never get until the leases end, and settle them
// (CollectorService refuses its Subscribe there anyway). An observer of `*` beside senders of
// named groups is accepted: the other groups are its to watch. The error is INVALID_ARGUMENT,
// starts with `variable`, names both entries by position and the group, never a token.
absl::Status CheckObserversApart(const std::vector<Credential>& credentials,
                                 absl::string_view variable);

// OK when `principal` holds one of `roles` and (unless `group` is empty) may use `group`, else
// PERMISSION_DENIED naming `method` or the group (never the credential).
grpc::Status CheckScope(const Principal& principal, unsigned roles, absl::string_view group,
                        absl::string_view method);

// Checks `authorization: Bearer <token>` metadata against the configured credentials. Only
// SHA-256 digests of the tokens are kept; a presented token is hashed and compared with every
// digest in constant time (CRYPTO_memcmp, no early exit, branch-free selection of the match),
// so timing reveals neither which token matched nor how much of one. Thread-safe after
// construction.
class Authenticator {
 public:
  // `credentials` empty and `allow_anonymous` false rejects everything. `allow_anonymous` is
  // the explicit development switch, or mutual TLS (which authenticates at the transport):
  // with no bearer tokens configured, every caller then gets Principal::Everything().
  Authenticator(const std::vector<Credential>& credentials, bool allow_anonymous);

  // The caller's principal, or UNAUTHENTICATED with a message that never contains the
  // presented credential.
  grpc::Status Authenticate(const grpc::ServerContextBase& context, Principal* principal) const;
  // The principal of a bearer token presented otherwise (the console's sign-in form), checked
  // as Authenticate checks metadata; UNAUTHENTICATED for any other token, and always when no
  // bearer tokens are configured (the anonymous modes grant nothing outside gRPC).
  grpc::Status AuthenticateToken(absl::string_view token, Principal* principal) const;

  // Whether a credential with the sender role may use `group`: one naming it, one of `*`, or a
  // legacy unscoped token. True for every group when no bearer tokens are configured (every
  // caller then has full access, a sender's).
  bool SenderServes(absl::string_view group) const;

 private:
  std::vector<std::string> digests_;
  std::vector<Principal> principals_;
  bool allow_anonymous_;
};

}  // namespace mailroom
