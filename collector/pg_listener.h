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
};

// Opens a connection to `url` of its own and LISTENs on `channel`. This is the only raw LISTEN
// connection of the collector: it runs nothing but LISTEN and the health check, because
// notifications arrive only while no transaction is open on it. Unavailable when PostgreSQL
// cannot be reached; the message never contains the URL's password.
absl::StatusOr<std::unique_ptr<NotificationListener>> ConnectPgListener(const std::string& url,
                                                                        const std::string& channel);

}  // namespace mailroom
