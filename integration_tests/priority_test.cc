// Password recoveries go first across the whole backlog of a group. Real
// PostgreSQL, a real collector and sender over gRPC (file transport): 2,000 activations queued
// behind the sender's budget pace of 3 emails/s, then 5 password recoveries, one after another
// or all in one transaction while the sender's window (max in flight) is full; with one sender
// each must be among the next 5 emails delivered after it was queued (with two, see the last
// test). Collector and sender run with their
// defaults for batching, polling, leases and max in flight; only the budget is set.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <pqxx/pqxx>
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "testing/collector_fixture.h"
#include "testing/process.h"
#include "testing/stack.h"

namespace mailroom {
namespace {

using testing::Files;
using testing::Slurp;

constexpr int kActivations = 2000;
constexpr int kRecoveries = 5;
constexpr double kPacePerSecond = 3.0;

class PriorityTest : public testing::StackTest {
 protected:
  // The delivered emails, oldest first (the file transport names them by the millisecond).
  std::vector<std::string> Delivered() { return Files(out_, ".eml"); }

  // Waits (bounded) until an email to `address` is among the delivered ones; returns its
  // position (1-based) in delivery order, or 0.
  size_t WaitForEmailTo(const std::string& address, size_t from, absl::Duration timeout) {
    const absl::Time give_up = absl::Now() + timeout;
    const std::string to = absl::StrCat("<", address, ">");
    size_t checked = from;
    while (absl::Now() < give_up) {
      std::vector<std::string> files = Delivered();
      // Files are only ever added, with later names: positions below `checked` are settled.
      for (; checked < files.size(); ++checked) {
        if (Slurp(files[checked]).find(to) != std::string::npos) return checked + 1;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    return 0;
  }

  // 2,000 accounts waiting for their activation emails, and `recovery_accounts` active accounts
  // r1, r2, ... (no token yet) to request recoveries for.
  void InsertBacklog(int recovery_accounts) {
    Exec(absl::StrCat("INSERT INTO accounts (email, login) SELECT 'a' || i || '@example.test',"
                      " 'a' || i FROM generate_series(1, ",
                      kActivations, ") i"));
    Exec(absl::StrCat("INSERT INTO accounts (email, login, status) SELECT 'r' || i ||"
                      " '@example.test', 'r' || i, 'active' FROM generate_series(1, ",
                      recovery_accounts, ") i"));
    // Their tokens made now, as a collector would (a running one may take some meanwhile).
    testing::TestDb(url_).CollectSignups();
    EXPECT_EQ(Scalar("SELECT count(*) FROM tokens"), kActivations);
  }
  int64_t SecondsLeftInMonth() {
    return Scalar("SELECT EXTRACT(EPOCH FROM date_trunc('month', now() AT TIME ZONE 'UTC')"
                  " + interval '1 month' - now() AT TIME ZONE 'UTC')::BIGINT");
  }

  // Starts the collector with its production defaults and a sender paced at 3 emails/s
  // behind 2,000 activations, and waits until the sender holds its max in flight (default
  // 100: the rest waits in PostgreSQL) and the budget's initial burst is spent. Accounts
  // r1..r5 are active (no token yet) to request recoveries for. nullptr (with a failure) if
  // it could not.
  std::unique_ptr<testing::Process> StartPacedBacklog() {
    out_ = dir_ + "/out";
    // The collector with its production defaults (the stack's test collector polls every
    // 300 ms and dispatches every notification at once, which would hide a slow path).
    collector_.reset();
    collector_ = StartCollector({{"MAILROOM_BATCH_TIMEOUT", "5000"},
                                 {"MAILROOM_POLL_INTERVAL", "2000"},
                                 {"MAILROOM_LEASE_MS", "60000"}},
                                "collector-defaults", collector_port_);
    if (collector_ == nullptr) {
      ADD_FAILURE() << "the collector did not start";
      return nullptr;
    }
    InsertBacklog(kRecoveries);

    // A monthly budget that paces at 3 emails/s for the rest of this month (the pace is the
    // money left divided by the time left).
    const double budget = kPacePerSecond * static_cast<double>(SecondsLeftInMonth()) * 0.10 / 1000;
    auto sender = StartSender({{"MAILROOM_TRANSPORT", "file"},
                               {"MAILROOM_FILE_DIR", out_},
                               {"MAILROOM_BUDGET", absl::StrFormat("%.4f", budget)},
                               {"MAILROOM_PRICE_PER_1000", "0.10"}});
    if (sender == nullptr) {
      ADD_FAILURE() << "the sender did not start";
      return nullptr;
    }
    if (WaitFor("SELECT (count(*) >= 100)::INT FROM delivery_states WHERE state = 'leased'", 1,
                absl::Seconds(60)) != 1 ||
        WaitFor("SELECT (count(*) >= 15)::INT FROM delivery_states WHERE state = 'sent'", 1,
                absl::Seconds(60)) != 1) {
      ADD_FAILURE() << "the backlog did not fill the sender's window\n" << sender->Log();
      return nullptr;
    }
    paced_from_ = absl::Now();
    paced_from_count_ = Delivered().size();
    return sender;
  }

  // The backlog really was paced and waiting behind: a few emails per second, most of the
  // activations still queued; and every recovery was sent.
  void ExpectPacedBacklog() {
    const size_t delivered = Delivered().size();
    const double rate = static_cast<double>(delivered - paced_from_count_) /
                        absl::ToDoubleSeconds(absl::Now() - paced_from_);
    std::printf("paced at %.2f emails/s; %zu delivered\n", rate, delivered);
    EXPECT_LT(rate, 2 * kPacePerSecond);
    EXPECT_LT(delivered, static_cast<size_t>(kActivations / 4));
    // A file is written before its SENT outcome is acknowledged and committed: wait for the
    // last acknowledgement rather than read the state at the instant the file appeared.
    EXPECT_EQ(WaitFor("SELECT count(*) FROM delivery_states d JOIN tokens t ON t.id = d.token_id"
                      " WHERE t.action = 'password_recovery' AND d.state = 'sent'",
                      kRecoveries, absl::Seconds(30)),
              kRecoveries);
  }

  // Two collectors with their production defaults and two senders (one on each) sharing one
  // group paced at 3 emails/s by its budget, behind 2,000 activations (and whatever `extra`
  // SQL queues), both windows full; `recovery_accounts` active accounts r1, r2, ... to request
  // for. The processes are kept in collector_b_, sender_a_, sender_b_. False (with a failure)
  // if it could not.
  bool StartTwoSendersBehindABacklog(int recovery_accounts, const std::string& extra = "") {
    out_ = dir_ + "/out";
    const std::map<std::string, std::string> production = {{"MAILROOM_BATCH_TIMEOUT", "5000"},
                                                           {"MAILROOM_POLL_INTERVAL", "2000"},
                                                           {"MAILROOM_LEASE_MS", "60000"}};
    collector_.reset();
    collector_ = StartCollector(production, "collector-a", collector_port_);
    const int port_b = testing::FreePort();
    collector_b_ = StartCollector(production, "collector-b", port_b);
    if (collector_ == nullptr || collector_b_ == nullptr ||
        WaitFor("SELECT count(*) FROM consumer_groups WHERE name = 'mailroom'", 1,
                absl::Seconds(10)) != 1) {
      ADD_FAILURE() << "the collectors did not start";
      return false;
    }
    // The group's budget: 3 emails/s for the rest of the month at $0.10 per 1,000 (default
    // burst).
    Exec(absl::StrCat("INSERT INTO group_budgets (group_id, monthly_budget_micros) SELECT id, ",
                      static_cast<int64_t>(kPacePerSecond * 100) * SecondsLeftInMonth(),
                      " FROM consumer_groups WHERE name = 'mailroom'"));
    InsertBacklog(recovery_accounts);
    if (!extra.empty()) Exec(extra);
    const std::map<std::string, std::string> sender_env = {{"MAILROOM_TRANSPORT", "file"},
                                                           {"MAILROOM_FILE_DIR", out_},
                                                           {"MAILROOM_PRICE_PER_1000", "0.10"}};
    sender_a_ = StartSender(sender_env, "sender-a", collector_port_);
    sender_b_ = StartSender(sender_env, "sender-b", port_b);
    if (sender_a_ == nullptr || sender_b_ == nullptr) {
      ADD_FAILURE() << "the senders did not start";
      return false;
    }
    if (WaitFor("SELECT (count(*) >= 200)::INT FROM delivery_states WHERE state = 'leased'", 1,
                absl::Seconds(60)) != 1 ||
        WaitFor("SELECT (count(*) >= 15)::INT FROM delivery_states WHERE state = 'sent'", 1,
                absl::Seconds(60)) != 1) {
      ADD_FAILURE() << "the backlog did not fill both senders' windows: "
                    << Scalar("SELECT count(*) FROM delivery_states WHERE state = 'leased'")
                    << " leased, "
                    << Scalar("SELECT count(*) FROM delivery_states WHERE state = 'sent'")
                    << " sent\n"
                    << sender_a_->Log() << sender_b_->Log();
      return false;
    }
    return true;
  }

  std::string out_;
  std::unique_ptr<testing::Process> collector_b_, sender_a_, sender_b_;
  absl::Time paced_from_;
  size_t paced_from_count_ = 0;
};

TEST_F(PriorityTest, EachRecoveryIsAmongTheNextFiveDeliveriesBehindAPacedBacklog) {
  auto sender = StartPacedBacklog();
  ASSERT_NE(sender, nullptr);

  for (int r = 1; r <= kRecoveries; ++r) {
    const size_t before = Delivered().size();
    Exec(absl::StrCat("INSERT INTO tokens (account, action) SELECT id, 'password_recovery'"
                      " FROM accounts WHERE login = 'r",
                      r, "'"));
    const size_t position = WaitForEmailTo(absl::StrCat("r", r, "@example.test"), before,
                                           absl::Seconds(60));
    ASSERT_GT(position, 0u) << "recovery " << r << " not delivered\n" << sender->Log();
    std::printf("recovery %d: delivery %zu after it was queued\n", r, position - before);
    EXPECT_LE(position - before, 5u) << "recovery " << r;
  }

  ExpectPacedBacklog();
}

// 5 recoveries committed in one transaction while the
// sender's window is full of paced activations. They get past the full window through the
// recovery lane at once (not one per freed slot), so each is among the next 5 deliveries.
TEST_F(PriorityTest, RecoveriesCommittedTogetherPastAFullWindowAreTheNextFiveDeliveries) {
  auto sender = StartPacedBacklog();
  ASSERT_NE(sender, nullptr);

  const size_t before = Delivered().size();
  Exec(absl::StrCat("INSERT INTO tokens (account, action) SELECT id, 'password_recovery'"
                    " FROM accounts WHERE login IN (SELECT 'r' || i FROM generate_series(1, ",
                    kRecoveries, ") i)"));
  for (int r = 1; r <= kRecoveries; ++r) {
    const size_t position = WaitForEmailTo(absl::StrCat("r", r, "@example.test"), before,
                                           absl::Seconds(60));
    ASSERT_GT(position, 0u) << "recovery " << r << " not delivered\n" << sender->Log();
    std::printf("recovery %d (one transaction): delivery %zu after it was queued\n", r,
                position - before);
    EXPECT_LE(position - before, static_cast<size_t>(kRecoveries)) << "recovery " << r;
  }
  ExpectPacedBacklog();
}

// Across senders and collectors, under the group's central budget: two collectors with their
// production defaults, two senders (one on each) sharing one group paced at 3 emails/s by its
// budget behind 2,000 activations, both windows full. Each round commits 5 recoveries in one
// transaction; whichever sender they are leased to, no activation of the group is granted a slot
// from their commit until they are sent and acknowledged (the collectors know both the leases and
// the grants), so they are the next 5 emails of the group granted after their commit. The
// exception is inherent: what is left of a grant the other sender received before the commit
// (the recoveries did not exist yet) is still spent on its activations, and such an email may
// be written after the commit. The sender the recoveries went to spends its own slots on them
// first. At 3 emails/s shared by two busy senders that is at most one email (measured: none or
// one in every round), so the recoveries are among the next 6 emails written, while no
// activation is granted a slot from the commit to their acknowledgement. Three rounds, each its
// own 5 accounts.
TEST_F(PriorityTest, RecoveriesGoFirstAcrossSendersAndCollectorsUnderTheGroupBudget) {
  constexpr int kRounds = 3;
  ASSERT_TRUE(StartTwoSendersBehindABacklog(kRounds * kRecoveries));
  testing::Process* sender_a = sender_a_.get();
  testing::Process* sender_b = sender_b_.get();
  const absl::Time paced_from = absl::Now();
  const size_t paced_from_count = Delivered().size();

  for (int round = 0; round < kRounds; ++round) {
    const std::vector<std::string> before_files = Delivered();
    const std::set<std::string> before(before_files.begin(), before_files.end());
    const int first = round * kRecoveries + 1;
    Exec(absl::StrCat("INSERT INTO tokens (account, action) SELECT id, 'password_recovery'"
                      " FROM accounts WHERE login IN (SELECT 'r' || i FROM generate_series(",
                      first, ", ", first + kRecoveries - 1, ") i)"));
    const int64_t committed_us = Scalar(
        "SELECT (EXTRACT(EPOCH FROM clock_timestamp()) * 1e6)::BIGINT");
    // Every email written since the commit, in the order the senders started writing them.
    std::vector<std::string> since;
    auto to = [](int r) { return absl::StrCat("<r", r, "@example.test>"); };
    std::vector<size_t> positions;
    const absl::Time give_up = absl::Now() + absl::Seconds(60);
    while (absl::Now() < give_up) {
      since.clear();
      for (const std::string& f : Delivered()) {
        if (before.count(f) == 0) since.push_back(f);
      }
      positions.clear();
      for (int r = first; r < first + kRecoveries; ++r) {
        for (size_t i = 0; i < since.size(); ++i) {
          if (Slurp(since[i]).find(to(r)) != std::string::npos) positions.push_back(i + 1);
        }
      }
      // Settled once an email later than the last recovery was written (any earlier one is
      // written by then: both senders name a file before writing it).
      if (positions.size() == static_cast<size_t>(kRecoveries) &&
          *std::max_element(positions.begin(), positions.end()) < since.size()) {
        break;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    ASSERT_EQ(positions.size(), static_cast<size_t>(kRecoveries))
        << "round " << round << "\n"
        << sender_a->Log() << sender_b->Log();
    std::sort(positions.begin(), positions.end());
    std::printf("round %d: recoveries committed together delivered at positions %s\n", round + 1,
                absl::StrJoin(positions, ", ").c_str());
    // The property itself, from the grants: from the commit until the last of the 5 recoveries
    // was acknowledged, no activation was granted a slot (a grant's lease is the default 10 s).
    ASSERT_EQ(WaitFor("SELECT count(*) FROM delivery_states d JOIN tokens t ON t.id = d.token_id"
                      " WHERE t.action = 'password_recovery' AND d.state = 'sent'",
                      (round + 1) * kRecoveries, absl::Seconds(30)),
              (round + 1) * kRecoveries);
    const int64_t acked_us = Scalar(
        "SELECT (EXTRACT(EPOCH FROM max(d.updated_at)) * 1e6)::BIGINT FROM delivery_states d"
        " JOIN tokens t ON t.id = d.token_id WHERE t.action = 'password_recovery'");
    EXPECT_EQ(Scalar(absl::StrCat("SELECT count(*) FROM budget_grants WHERE NOT recovery AND"
                                  " expires_at - INTERVAL '10 seconds' BETWEEN to_timestamp(",
                                  committed_us, " / 1e6) AND to_timestamp(", acked_us, " / 1e6)")),
              0)
        << "round " << round;
    // The emails: the 5 recoveries go first, but for the slot the other sender may hold from
    // before the commit (see above): positions 1-5, or 1-6 with one of them its activation.
    EXPECT_LE(positions.back(), static_cast<size_t>(kRecoveries + 1))
        << "round " << round << ": more than the one email granted before the commit went first";
  }

  // Both senders sent (the group's pace was shared) and it really was paced.
  const std::vector<std::string> files = Delivered();
  const double rate = static_cast<double>(files.size() - paced_from_count) /
                      absl::ToDoubleSeconds(absl::Now() - paced_from);
  std::printf("paced at %.2f emails/s; %zu delivered\n", rate, files.size());
  EXPECT_LT(rate, 2 * kPacePerSecond);
  EXPECT_LT(files.size(), static_cast<size_t>(kActivations / 4));
  EXPECT_EQ(WaitFor("SELECT count(*) FROM delivery_states d JOIN tokens t ON t.id = d.token_id"
                    " WHERE t.action = 'password_recovery' AND d.state = 'sent'",
                    kRounds * kRecoveries, absl::Seconds(30)),
            kRounds * kRecoveries);
}

// The critical class across senders: behind 2,000 activations and 2,000 notices, two collectors
// and two senders on one group budget of 3 emails/s, 5 password recoveries and 5 sign-in codes
// committed in one transaction are among the next 12 emails written after their commit (10,
// and what is left of the grant the other sender held before the commit, as above), and no
// grant other than a critical one is made from their commit until their acknowledgement.
TEST_F(PriorityTest, RecoveriesAndSignInCodesGoFirstBehindActivationsAndNotices) {
  constexpr int kNotices = 2000;
  constexpr int kCritical = 2 * kRecoveries;
  ASSERT_TRUE(StartTwoSendersBehindABacklog(
      kCritical,
      absl::StrCat("INSERT INTO accounts (email, login, status, activated_at) SELECT 'n' || i ||"
                   " '@example.test', 'n' || i, 'active', 1 FROM generate_series(1, ",
                   kNotices,
                   ") i;"
                   "INSERT INTO tokens (account, action) SELECT id, 'password_changed'"
                   " FROM accounts WHERE login LIKE 'n%'")));
  testing::Process* sender_a = sender_a_.get();
  testing::Process* sender_b = sender_b_.get();

  const std::vector<std::string> before_files = Delivered();
  const std::set<std::string> before(before_files.begin(), before_files.end());
  {
    pqxx::connection c(url_);
    pqxx::work tx(c);
    tx.exec("SET LOCAL search_path = mailroom");
    tx.exec(absl::StrCat("SELECT mailroom.request(id, 'password_recovery') FROM accounts"
                         " WHERE login IN (SELECT 'r' || i FROM generate_series(1, ",
                         kRecoveries, ") i)"));
    tx.exec(absl::StrCat("SELECT mailroom.request(id, 'login_code') FROM accounts"
                         " WHERE login IN (SELECT 'r' || i FROM generate_series(",
                         kRecoveries + 1, ", ", kCritical, ") i)"));
    tx.commit();
  }
  const int64_t committed_us = Scalar(
      "SELECT (EXTRACT(EPOCH FROM clock_timestamp()) * 1e6)::BIGINT");
  const std::string critical_sent =
      "SELECT count(*) FROM delivery_states d JOIN tokens t ON t.id = d.token_id"
      " WHERE t.action IN ('password_recovery', 'login_code') AND d.state = 'sent'";
  ASSERT_EQ(WaitFor(critical_sent, kCritical, absl::Seconds(60)), kCritical)
      << sender_a->Log() << sender_b->Log();
  // Positions among the emails written since the commit.
  std::vector<size_t> positions;
  std::vector<std::string> since;
  for (const std::string& f : Delivered()) {
    if (before.count(f) == 0) since.push_back(f);
  }
  for (int r = 1; r <= kCritical; ++r) {
    const std::string to = absl::StrCat("<r", r, "@example.test>");
    for (size_t i = 0; i < since.size(); ++i) {
      if (Slurp(since[i]).find(to) != std::string::npos) positions.push_back(i + 1);
    }
  }
  ASSERT_EQ(positions.size(), static_cast<size_t>(kCritical));
  std::sort(positions.begin(), positions.end());
  std::printf("recoveries and sign-in codes delivered at positions %s\n",
              absl::StrJoin(positions, ", ").c_str());
  EXPECT_LE(positions.back(), 12u);
  const int64_t acked_us = Scalar(
      "SELECT (EXTRACT(EPOCH FROM max(d.updated_at)) * 1e6)::BIGINT FROM delivery_states d"
      " JOIN tokens t ON t.id = d.token_id WHERE t.action IN ('password_recovery', 'login_code')");
  EXPECT_EQ(Scalar(absl::StrCat("SELECT count(*) FROM budget_grants WHERE NOT recovery AND"
                                " expires_at - INTERVAL '10 seconds' BETWEEN to_timestamp(",
                                committed_us, " / 1e6) AND to_timestamp(", acked_us, " / 1e6)")),
            0);
  // No notice went before the activations: none of them was sent yet.
  EXPECT_EQ(Scalar("SELECT count(*) FROM delivery_states d JOIN tokens t ON t.id = d.token_id"
                   " WHERE t.action = 'password_changed' AND d.state IN ('sent', 'leased')"),
            0);
}

}  // namespace
}  // namespace mailroom
