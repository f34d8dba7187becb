#include "collector/pg_listener.h"

#include <pqxx/pqxx>

#include "absl/strings/str_cat.h"

namespace mailroom {
namespace {

class PgListener : public NotificationListener {
 public:
  // Counts the notifications libpqxx hands over in get_notifs().
  class Receiver : public pqxx::notification_receiver {
   public:
    Receiver(pqxx::connection_base& c, const std::string& channel, int* count)
        : pqxx::notification_receiver(c, channel), count_(count) {}
    void operator()(const std::string&, int) override { ++*count_; }

   private:
    int* count_;
  };

  explicit PgListener(const std::string& url) : conn_(url) {}
  ~PgListener() override {
    try {
      receiver_.reset();
    } catch (...) {
      // Closing a broken connection may throw from UNLISTEN; nothing to do.
    }
  }

  // Issues LISTEN (the receiver's constructor does).
  void Listen(const std::string& channel) {
    receiver_ = std::make_unique<Receiver>(conn_, channel, &count_);
  }

  int fd() override { return conn_.sock(); }

  absl::StatusOr<int> TakeNotifications() override {
    try {
      count_ = 0;
      conn_.get_notifs();
      return count_;
    } catch (const std::exception& e) {
      return absl::UnavailableError(absl::StrCat("listener connection lost: ", e.what()));
    }
  }

  absl::Status Ping() override {
    try {
      pqxx::nontransaction tx(conn_);
      tx.exec("SELECT 1");
      return absl::OkStatus();
    } catch (const std::exception& e) {
      return absl::UnavailableError(absl::StrCat("listener connection lost: ", e.what()));
    }
  }

 private:
  pqxx::connection conn_;
  std::unique_ptr<Receiver> receiver_;
  int count_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<NotificationListener>> ConnectPgListener(
    const std::string& url, const std::string& channel) {
  try {
    auto listener = std::make_unique<PgListener>(url);
    listener->Listen(channel);
    return listener;
  } catch (const std::exception& e) {
    // libpq's connection errors name host and port, never the password.
    return absl::UnavailableError(absl::StrCat("database connection failed: ", e.what()));
  }
}

}  // namespace mailroom
