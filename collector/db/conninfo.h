#pragma once

// PostgreSQL connection strings: whether libpq can parse one, and the connection defaults the
// collector adds to the ones it is given. What `collector migrate` needs to check its database
// URL, and what the configuration uses to build the URLs of the service's connections.

#include <string>

#include "absl/time/time.h"

namespace mailroom {

// True when libpq can parse `conninfo` (a URL or key=value string). libpq's own error message
// quotes the string, which may hold a password: callers name the variable instead.
bool ValidConninfo(const std::string& conninfo);

// `conninfo` (a URL or key=value string) as a key=value string with the connection defaults
// the collector needs to notice a dead or half-open connection within 30 s added, unless the
// string sets them already: keepalives=1, keepalives_idle=10, keepalives_interval=5,
// keepalives_count=3, tcp_user_timeout=30000, and in `options` (appended to the user's options
// unless they set the same parameter) `-c statement_timeout=N` and
// `-c idle_in_transaction_session_timeout=M`. The collector never waits inside a transaction:
// a session idle in one belongs to a collector that is paused or cut off, and its transaction
// may hold a consumer group's row lock that every other collector's dequeue needs (and leases
// that are running out before anyone gets the jobs). `conninfo` must be valid (ValidConninfo);
// an invalid one is returned unchanged.
std::string WithConnectionDefaults(const std::string& conninfo, absl::Duration statement_timeout,
                                   absl::Duration idle_in_transaction_timeout);

// `conninfo` with only the keepalive defaults of WithConnectionDefaults (no `options`): for
// connections that may go through a transaction-pooling pgbouncer, which refuses `options`.
std::string WithKeepaliveDefaults(const std::string& conninfo);

// How long a collector's session may sit idle inside a transaction before PostgreSQL ends it:
// a quarter of the lease, within 100 ms..5 s.
absl::Duration IdleInTransactionTimeout(absl::Duration lease);

}  // namespace mailroom
