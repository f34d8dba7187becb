#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mailroom {

// Where the dispatcher's wake-ups come from: a connection LISTENing on the NOTIFY channel.
// Notifications are only wake-up signals (PostgreSQL folds identical ones sent in one
// transaction), never a count of work. Used from one thread (the dispatcher's loop); no
// exception leaves it.
class NotificationListener {
 public:
  virtual ~NotificationListener() = default;
  // A descriptor that becomes readable when notifications arrive (or the connection drops).
  virtual int fd() = 0;
  // Consumes the notifications that have arrived, without blocking; returns how many.
  // Unavailable when the connection is lost.
  virtual absl::StatusOr<int> TakeNotifications() = 0;
  // The idle health check (SELECT 1 on this connection, which keeps NAT and firewalls from
  // dropping it silently). Unavailable when the connection is lost.
  virtual absl::Status Ping() = 0;

  // The busy mark (docs/design.md, "Wake-up"). While every collector is marked busy, the token
  // trigger skips its NOTIFY, so a busy collector must poll its cursor itself. The defaults
  // are for listeners without a mark (test fakes): every commit notifies them.
  // Marks this collector busy. From this call on it must poll until it marks itself idle.
  virtual absl::Status MarkBusy() { return absl::OkStatus(); }
  // Marks this collector idle (commits notify again) and returns the transactions running
  // right after the change, as a pg_snapshot in text: any of them may have read the busy mark
  // and skipped its NOTIFY, so the collector dequeues once more after they have all ended
  // (StillRunning). "" when there is nothing to wait for (no mark).
  virtual absl::StatusOr<std::string> MarkIdle() { return std::string(); }
  // How many of the transactions running in `snapshot` (from MarkIdle) are still running.
  virtual absl::StatusOr<int> StillRunning(const std::string& /*snapshot*/) { return 0; }
  // Removes this collector's mark when it stops cleanly: a collector that is gone no longer
  // counts as idle, so commits stop notifying when no collector is left to hear them (the
  // next collector to connect drains its groups first).
  virtual absl::Status Leave() { return absl::OkStatus(); }
};

// Opens a connection to `url` of its own and LISTENs on `channel`. This is the only raw LISTEN
// connection of the collector: it runs nothing but LISTEN, the health check and the busy mark's
// short statements, because notifications arrive only while no transaction is open on it. The
// mark is registered by this connection's backend pid, so it must not go through a pooler.
// Unavailable when PostgreSQL cannot be reached; the message never contains the URL's password.
absl::StatusOr<std::unique_ptr<NotificationListener>> ConnectPgListener(const std::string& url,
                                                                        const std::string& channel);

}  // namespace mailroom
