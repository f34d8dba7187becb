// Churn: many tokens through the queue with retention on. A real collector with
// a short retention (MAILROOM_RETENTION, default here 1 s, pass every 1 s) drains rounds of
// tokens that one subscriber acknowledges as SENT; after each round the benchmark prints the
// drain rate, the sizes of `tokens`, `deliveries` and `lease_batches` (with indexes; since 0021
// a job sent under its first lease has no `deliveries` row, only a bit in its batch's
// `lease_batches` row), their live and dead tuples (pg_stat_user_tables), the rows of
// `delivery_counts`, what one mailroom_stats call
// costs and whether its `sent` equals every acknowledgement so far (pruning must not change
// the counts). Tokens expire --expiry seconds after insert (pruned once expired and older than
// the retention), so the tables should reach a plateau after that long.
//
// Then a transaction with an xid is held open on another connection for --hold seconds while
// rounds go on (an application session left idle in a transaction), then rolled back, and a
// few more rounds show the recovery; with --idle_timeout=S the same again with
// idle_in_transaction_session_timeout = S s on that session (the mitigation), for
// --timeout_hold seconds of rounds (default: --hold; --hold=0 runs the mitigation alone).
//
// Usage: churn_bench [--tokens=10000000] [--round=100000] [--hold=600] [--after=3]
//                    [--idle_timeout=0] [--timeout_hold=<hold>] [--expiry=60]
//                    [--retention_ms=1000] [--fsync=off]
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <pqxx/pqxx>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "collector/schema/migrate.h"
#include "common/flags.h"
#include "grpcpp/grpcpp.h"
#include "testing/collector_client.h"
#include "testing/pg_server.h"
#include "testing/process.h"

namespace mailroom {
namespace {

constexpr char kKey[] = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
constexpr char kBearer[] = "churn-subscriber-token-0123456789";

struct Options {
  int64_t tokens = 10000000;
  int round = 100000;
  int hold_seconds = 600;
  int rounds_after = 3;
  int expiry_seconds = 60;
  int retention_ms = 1000;
  int idle_timeout_seconds = 0;
  int timeout_hold_seconds = -1;  // -1: as hold_seconds
  bool fsync = false;
};

class Churn {
 public:
  Churn(const Options& o, const std::string& url) : o_(o), url_(url), db_(url) {}

  void Setup() {
    pqxx::nontransaction(db_).exec(
        // No abuse limits (one account gets a token per round) and a window that does not
        // keep tokens from being pruned.
        "UPDATE mailroom_settings SET recovery_limit_per_account = NULL,"
        " recovery_limit_per_address = NULL, activation_limit_per_account = NULL,"
        " activation_limit_per_address = NULL, limit_window_seconds = 1");
    for (int done = 0; done < o_.round; done += 10000) {
      pqxx::work tx(db_);
      tx.exec(absl::StrCat("INSERT INTO accounts (email, login) SELECT 'c' || i ||"
                           " '@churn.test', 'c' || i FROM generate_series(",
                           done + 1, ", ", std::min(o_.round, done + 10000), ") i"));
      tx.commit();
    }
    // The accounts' own activation tokens (the warm-up) expire like the rounds' tokens.
    pqxx::nontransaction(db_).exec(absl::StrCat(
        "UPDATE tokens SET expires_at = EXTRACT(EPOCH FROM now())::BIGINT + ", o_.expiry_seconds));
  }

  void StartCollector() {
    port_ = testing::FreePort();
    auto p = testing::Process::Spawn({testing::Runfile("mailroom/collector/collector")},
                                     {{"MAILROOM_DATABASE_URL", url_},
                                      {"MAILROOM_SECRET_KEY", kKey},
                                      {"MAILROOM_LISTEN_ADDRESS",
                                       absl::StrCat("127.0.0.1:", port_)},
                                      {"MAILROOM_METRICS_ADDRESS", "off"},
                                      {"MAILROOM_SUBSCRIBER_TOKENS", kBearer},
                                      {"MAILROOM_BATCH_LIMIT", "1000"},
                                      {"MAILROOM_RETENTION", absl::StrCat(o_.retention_ms)},
                                      {"MAILROOM_RETENTION_INTERVAL", "1000"},
                                      {"MAILROOM_LOG_LEVEL", "warn"}},
                                     "/tmp/mailroom-churn-collector.log");
    if (!p.ok()) {
      std::fprintf(stderr, "cannot start collector: %s\n", p.status().ToString().c_str());
      std::exit(1);
    }
    collector_ = *std::move(p);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port_),
                                   grpc::InsecureChannelCredentials());
    channel_->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(20));
  }

  // Inserts one round of tokens (one per account, transactions of 10,000), drains them and
  // prints one line.
  void Round(const std::string& label) {
    absl::Time t0 = absl::Now();
    for (int done = 0; done < o_.round; done += 10000) {
      pqxx::work tx(db_);
      tx.exec(absl::StrCat("INSERT INTO tokens (account, action, expires_at) SELECT id,"
                           " 'activation', EXTRACT(EPOCH FROM now())::BIGINT + ",
                           o_.expiry_seconds, " FROM accounts WHERE id > ", done,
                           " AND id <= ", std::min(o_.round, done + 10000)));
      tx.commit();
    }
    absl::Time t1 = absl::Now();
    inserted_ += o_.round;
    const size_t acked = Drain(o_.round);
    absl::Time t2 = absl::Now();
    acked_ += acked;
    Report(label, absl::ToDoubleSeconds(t1 - t0), acked, absl::ToDoubleSeconds(t2 - t1));
  }

  // The initial activation tokens of the accounts (not counted as a round).
  void Warmup() {
    absl::Time t0 = absl::Now();
    const size_t acked = Drain(o_.round);
    acked_ += acked;
    Report("warm-up", 0, acked, absl::ToDoubleSeconds(absl::Now() - t0));
  }

  int64_t inserted() const { return inserted_; }
  pqxx::connection& db() { return db_; }

 private:
  // One subscription until `n` jobs are recorded SENT (or no progress for 30 s).
  size_t Drain(size_t n) {
    testing::TestSubscriber sub(channel_, kBearer, "mailroom", 10000, "churn");
    size_t acked = 0;
    absl::Time last_progress = absl::Now();
    while (acked < n && absl::Now() - last_progress < absl::Seconds(30)) {
      auto jobs = sub.Take();
      if (jobs.empty()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        continue;
      }
      for (size_t i = 0; i < jobs.size(); i += 5000) {
        std::vector<uint64_t> ids;
        for (size_t j = i; j < std::min(jobs.size(), i + 5000); ++j) {
          ids.push_back(jobs[j].job_id());
        }
        v1::AcknowledgeResponse resp;
        if (sub.Ack(ids, v1::OUTCOME_SENT, "", 0, &resp).ok()) acked += resp.recorded();
      }
      last_progress = absl::Now();
    }
    return acked;
  }

  void Report(const std::string& label, double insert_s, size_t acked, double drain_s) {
    pqxx::nontransaction tx(db_);
    auto sizes = tx.exec1(
        "SELECT pg_total_relation_size('tokens'), pg_total_relation_size('deliveries'),"
        " (SELECT n_live_tup FROM pg_stat_user_tables WHERE relname = 'tokens'),"
        " (SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'tokens'),"
        " (SELECT n_live_tup FROM pg_stat_user_tables WHERE relname = 'deliveries'),"
        " (SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'deliveries'),"
        " (SELECT count(*) FROM delivery_counts),"
        " pg_total_relation_size('lease_batches'),"
        " (SELECT n_live_tup FROM pg_stat_user_tables WHERE relname = 'lease_batches'),"
        " (SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'lease_batches')");
    absl::Time s0 = absl::Now();
    auto stats = tx.exec1("SELECT sent FROM mailroom_stats('mailroom')");
    double stats_ms = absl::ToDoubleMilliseconds(absl::Now() - s0);
    const int64_t sent = stats[0].as<int64_t>();
    std::printf("%-14s inserted %9lld  insert %5.1f s  drained %6zu in %5.2f s = %7.0f jobs/s  "
                "tokens %6.1f MB live %7lld dead %7lld  deliveries %6.1f MB live %7lld dead "
                "%7lld  lease_batches %6.1f MB live %5lld dead %5lld  counter rows %4lld  "
                "mailroom_stats %6.2f ms  sent %lld (%s)\n",
                label.c_str(), static_cast<long long>(inserted_), insert_s, acked, drain_s,
                drain_s > 0 ? acked / drain_s : 0.0, sizes[0].as<int64_t>() / 1048576.0,
                sizes[2].as<long long>(), sizes[3].as<long long>(),
                sizes[1].as<int64_t>() / 1048576.0, sizes[4].as<long long>(),
                sizes[5].as<long long>(), sizes[7].as<int64_t>() / 1048576.0,
                sizes[8].as<long long>(), sizes[9].as<long long>(), sizes[6].as<long long>(),
                stats_ms, static_cast<long long>(sent),
                sent == static_cast<int64_t>(acked_) ? "= every SENT acknowledged"
                                                     : "MISMATCH with acknowledgements");
    std::fflush(stdout);
  }

  const Options o_;
  const std::string url_;
  pqxx::connection db_;
  int port_ = 0;
  std::unique_ptr<testing::Process> collector_;
  std::shared_ptr<grpc::Channel> channel_;
  int64_t inserted_ = 0;
  size_t acked_ = 0;
};

// Holds a transaction with an xid open on another connection (an application session left
// idle in a transaction) for --hold seconds while rounds go on, then rolls it back and runs
// --after rounds. With `idle_timeout` > 0 the session has idle_in_transaction_session_timeout
// set to that many seconds (the mitigation): PostgreSQL ends it.
void HoldOpen(Churn& churn, const std::string& url, const Options& o, int idle_timeout,
              int hold_seconds) {
  if (idle_timeout > 0) {
    std::printf("the same with idle_in_transaction_session_timeout = %d s on that session:\n",
                idle_timeout);
  } else {
    std::printf("a transaction with an xid held open on another connection for %d s:\n",
                hold_seconds);
  }
  pqxx::connection holder(url);
  if (idle_timeout > 0) {
    pqxx::nontransaction(holder).exec(
        absl::StrCat("SET idle_in_transaction_session_timeout = '", idle_timeout, "s'"));
  }
  auto held = std::make_unique<pqxx::work>(holder);
  held->exec("SELECT pg_current_xact_id()");
  absl::Time start = absl::Now();
  while (absl::Now() - start < absl::Seconds(hold_seconds)) {
    churn.Round(absl::StrCat(idle_timeout > 0 ? "timeout " : "held ",
                             static_cast<int>(absl::ToDoubleSeconds(absl::Now() - start)), " s"));
  }
  const int holder_pid = holder.backendpid();
  const bool alive = pqxx::nontransaction(churn.db())
                         .exec1(absl::StrCat("SELECT count(*) FROM pg_stat_activity WHERE pid = ",
                                             holder_pid))[0]
                         .as<int>() > 0;
  try {
    held->abort();
  } catch (const std::exception&) {
    // The session is gone (ended by idle_in_transaction_session_timeout).
  }
  held.reset();
  std::printf(alive ? "transaction rolled back after %.0f s:\n"
                    : "after %.0f s: the session had been ended by PostgreSQL "
                      "(idle_in_transaction_session_timeout):\n",
              absl::ToDoubleSeconds(absl::Now() - start));
  for (int r = 1; r <= o.rounds_after; ++r) churn.Round(absl::StrCat("after ", r));
}

}  // namespace
}  // namespace mailroom

ABSL_FLAG(int64_t, tokens, 10000000, "tokens inserted in all");
ABSL_FLAG(int, round, 100000, "tokens per round (a multiple of 10000)");
ABSL_FLAG(int, hold, 600, "seconds of rounds with a transaction held open (0: none)");
ABSL_FLAG(int, after, 3, "rounds after the open transaction ends");
ABSL_FLAG(int, expiry, 60, "token expiry (seconds)");
ABSL_FLAG(int, retention_ms, 1000, "MAILROOM_RETENTION of the collector (ms)");
ABSL_FLAG(int, idle_timeout, 0,
          "then the same with idle_in_transaction_session_timeout of this many seconds (0: not)");
ABSL_FLAG(int, timeout_hold, -1, "seconds of rounds of that run (-1: as --hold)");
ABSL_FLAG(std::string, fsync, "off", "PostgreSQL fsync: on or off");

int main(int argc, char** argv) {
  if (auto done = mailroom::ParseToolFlags("churn_bench", "usage: churn_bench [flags]\n", argc,
                                           argv)) {
    return *done;
  }
  mailroom::Options o;
  o.tokens = absl::GetFlag(FLAGS_tokens);
  o.round = absl::GetFlag(FLAGS_round);
  o.hold_seconds = absl::GetFlag(FLAGS_hold);
  o.rounds_after = absl::GetFlag(FLAGS_after);
  o.expiry_seconds = absl::GetFlag(FLAGS_expiry);
  o.retention_ms = absl::GetFlag(FLAGS_retention_ms);
  o.idle_timeout_seconds = absl::GetFlag(FLAGS_idle_timeout);
  o.timeout_hold_seconds = absl::GetFlag(FLAGS_timeout_hold);
  o.fsync = absl::GetFlag(FLAGS_fsync) == "on";
  if (o.round < 10000 || o.round % 10000 != 0) {
    return mailroom::UsageError("churn_bench", "--round: a multiple of 10000", "");
  }
  auto pg = mailroom::testing::PgServer::Start(/*durable=*/o.fsync);
  if (!pg.ok()) {
    std::fprintf(stderr, "%s\n", pg.status().ToString().c_str());
    return 1;
  }
  auto url = (*pg)->CreateDatabase("churn");
  if (!url.ok() || !mailroom::MigrateUp(*url, mailroom::EmbeddedMigrations()).ok()) {
    std::fprintf(stderr, "cannot create the database\n");
    return 1;
  }
  std::printf("churn: %lld tokens in rounds of %d, token expiry %d s, MAILROOM_RETENTION=%d ms "
              "(pass every 1 s), PostgreSQL fsync=%s, autovacuum defaults\n",
              static_cast<long long>(o.tokens), o.round, o.expiry_seconds, o.retention_ms,
              o.fsync ? "on" : "off");
  mailroom::Churn churn(o, *url);
  churn.Setup();
  churn.StartCollector();
  churn.Warmup();
  for (int r = 1; churn.inserted() < o.tokens; ++r) churn.Round(absl::StrCat("round ", r));

  if (o.hold_seconds > 0) mailroom::HoldOpen(churn, *url, o, 0, o.hold_seconds);
  if (o.idle_timeout_seconds > 0) {
    mailroom::HoldOpen(churn, *url, o, o.idle_timeout_seconds,
                       o.timeout_hold_seconds >= 0 ? o.timeout_hold_seconds : o.hold_seconds);
  }
  return 0;
}
