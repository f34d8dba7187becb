#include "collector/dispatch/pg_listener.h"

#include <optional>

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
    return Query([](pqxx::nontransaction& tx) { tx.exec("SELECT 1"); });
  }

  absl::Status MarkBusy() override { return Mark(false); }

  absl::Status Leave() override { return Mark(std::nullopt); }

  absl::StatusOr<std::string> MarkIdle() override {
    absl::Status st = Mark(true);
    if (!st.ok()) return st;
    // Taken after the mark's commit: whoever read the busy mark has an xid by then (the
    // trigger runs after its INSERT) and has either committed or is running in this snapshot.
    std::string snapshot;
    st = Query([&](pqxx::nontransaction& tx) {
      snapshot = tx.exec1("SELECT pg_current_snapshot()::text")[0].as<std::string>();
    });
    if (!st.ok()) return st;
    return snapshot;
  }

  absl::StatusOr<int> StillRunning(const std::string& snapshot) override {
    int running = 0;
    absl::Status st = Query([&](pqxx::nontransaction& tx) {
      // A transaction of `snapshot` still running is running in the current snapshot too.
      running = tx.exec_params1("SELECT count(*) FROM pg_snapshot_xip($1::pg_snapshot) a"
                                " JOIN pg_snapshot_xip(pg_current_snapshot()) b ON a = b",
                                snapshot)[0]
                    .as<int>();
    });
    if (!st.ok()) return st;
    return running;
  }

 private:
  // Runs `fn` outside a transaction block on this connection (notifications arrive between
  // statements). Unavailable when the connection is lost or the statement fails.
  template <typename Fn>
  absl::Status Query(Fn fn) {
    try {
      pqxx::nontransaction tx(conn_);
      fn(tx);
      return absl::OkStatus();
    } catch (const std::exception& e) {
      return absl::UnavailableError(absl::StrCat("listener connection lost: ", e.what()));
    }
  }

  // mailroom_collector_mark, alone in autocommit: one round trip, and its lock is released
  // by that statement's commit (asynchronous, set by the function). No value: leaving.
  absl::Status Mark(std::optional<bool> idle) {
    try {
      pqxx::nontransaction tx(conn_);
      tx.exec_params("SELECT mailroom.mailroom_collector_mark($1::boolean)", idle);
      return absl::OkStatus();
    } catch (const std::exception& e) {
      const char* what = !idle   ? "removing the collector's mark"
                         : *idle ? "marking the collector idle"
                                 : "marking the collector busy";
      return absl::UnavailableError(absl::StrCat(what, " failed: ", e.what()));
    }
  }

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
