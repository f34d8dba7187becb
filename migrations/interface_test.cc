// The application's interface (mailroom.request, mailroom.consume, mailroom.account_emails)
// against a throwaway PostgreSQL, called as an application's role that has exactly the rights
// mailroom.grant_application gives.
#include <atomic>
#include <map>
#include <pqxx/pqxx>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collector/signing.h"
#include "testing/migrated_database.h"
#include "gtest/gtest.h"
#include "testing/intruder.h"

namespace mailroom {
namespace {

constexpr char kKey[] = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

struct Decision {
  std::string decision, token_id, retry_at, reason;
};
struct Outcome {
  std::string outcome, account, action;
  bool operator==(const Outcome& o) const {
    return outcome == o.outcome && account == o.account && action == o.action;
  }
};
std::ostream& operator<<(std::ostream& os, const Outcome& o) {
  return os << "(" << o.outcome << ", " << o.account << ", " << o.action << ")";
}

std::string Field(const pqxx::field& f) { return f.is_null() ? "NULL" : f.as<std::string>(); }

class InterfaceTest : public testing::MigratedDatabaseTest {
 protected:
  void SetUp() override {
    MigratedDatabaseTest::SetUp();
    Exec("DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'app') THEN"
         " CREATE ROLE app LOGIN; END IF; END $$;"
         "SELECT mailroom.grant_application('app')");
    app_ = std::make_unique<pqxx::connection>(testing::UrlAs(url_, "app"));
    pqxx::nontransaction(*app_).exec("SET search_path = mailroom");
  }

  // As the application: one autocommit statement.
  pqxx::result App(const std::string& sql) { return pqxx::nontransaction(*app_).exec(sql); }
  int64_t Signup(const std::string& login, const std::string& status = "provisioned") {
    return App(absl::StrCat("INSERT INTO mailroom.accounts (email, login, status) VALUES ('",
                            login, "@example.test', '", login, "', '", status,
                            "') RETURNING id"))[0][0]
        .as<int64_t>();
  }
  Decision Request(int64_t account, const std::string& action,
                   const std::string& address = "NULL") {
    pqxx::row r = App(absl::StrCat("SELECT * FROM mailroom.request(", account, ", ",
                                   app_->quote(action), ", ", address, ")"))[0];
    return {Field(r[0]), Field(r[1]), Field(r[2]), Field(r[3])};
  }
  static Outcome Consume(pqxx::connection& c, const std::string& token, const std::string& code) {
    pqxx::nontransaction tx(c);
    pqxx::row r = tx.exec(absl::StrCat("SELECT * FROM mailroom.consume(", tx.quote(token), ", ",
                                       code.empty() ? "NULL" : tx.quote(code), ")"))[0];
    return {Field(r[0]), Field(r[1]), Field(r[2])};
  }
  Outcome Consume(const std::string& token, const std::string& code = "") {
    return Consume(*app_, token, code);
  }
  // The signed token of token `id` and its code, as the collector makes them.
  std::pair<std::string, std::string> Link(int64_t id) {
    pqxx::nontransaction tx(*conn_);
    pqxx::row r = tx.exec1(absl::StrCat(
        "SELECT action::text, secret, code FROM mailroom.tokens WHERE id = ", id));
    const TokenAction action = r[0].as<std::string>() == "activation"
                                   ? TokenAction::kActivation
                                   : TokenAction::kPasswordRecovery;
    const std::string code = r[2].as<std::string>();
    auto token = SignToken(*ParseSigningKey(kKey), action, pqxx::binarystring(r[1]).str(), code);
    EXPECT_TRUE(token.ok());
    return {*token, code};
  }
  int64_t ActivationToken(int64_t account) {
    CollectSignups();
    return Int(absl::StrCat("SELECT id FROM mailroom.tokens WHERE account = ", account,
                            " AND action = 'activation' ORDER BY id DESC LIMIT 1"));
  }

  std::unique_ptr<pqxx::connection> app_;
};

// The application's role holds exactly the documented rights: nothing on any table of
// mailroom's but its own accounts, and EXECUTE on the interface (pgcrypto's functions and the
// code generator aside: PUBLIC's, harmless).
TEST_F(InterfaceTest, TheApplicationsRoleHasOnlyTheInterfacesRights) {
  const std::string rights = absl::StrJoin(testing::IntruderGains(url_, "app"), ", ");
  EXPECT_EQ(rights, "account_emails:SELECT, accounts:INSERT, accounts:SELECT, accounts_id_seq:USAGE");
  pqxx::nontransaction tx(*conn_);
  pqxx::result fns = tx.exec(
      "SELECT p.proname FROM pg_proc p WHERE p.pronamespace = 'mailroom'::regnamespace"
      "   AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass"
      "                      AND d.objid = p.oid AND d.deptype = 'e')"
      "   AND has_function_privilege('app', p.oid, 'EXECUTE') ORDER BY 1");
  std::vector<std::string> names;
  for (const auto& row : fns) names.push_back(row[0].as<std::string>());
  // mailroom_random_code: the tokens' default, which runs as the inserting role.
  EXPECT_EQ(absl::StrJoin(names, ","), "consume,mailroom_random_code,request");
  // Column UPDATE on accounts for the lifecycle, nothing on tokens.
  EXPECT_TRUE(tx.exec1("SELECT has_column_privilege('app', 'mailroom.accounts', 'status',"
                       " 'UPDATE')")[0].as<bool>());
  EXPECT_FALSE(tx.exec1("SELECT has_table_privilege('app', 'mailroom.tokens',"
                        " 'SELECT,INSERT,UPDATE,DELETE')")[0].as<bool>());
  EXPECT_THROW(App("UPDATE mailroom.tokens SET rate_limited = false"), pqxx::sql_error);
  EXPECT_THROW(App("SELECT mailroom.mailroom_collect_signups(10)"), pqxx::sql_error);
}

TEST_F(InterfaceTest, RequestRefusesWhatItCannotSend) {
  const int64_t provisioned = Signup("p");
  const int64_t active = Signup("a", "active");
  const int64_t suspended = Signup("s", "suspended");
  auto refused = [&](int64_t account, const std::string& action, const std::string& address) {
    Decision d = Request(account, action, address);
    EXPECT_EQ(d.decision, "refused");
    EXPECT_EQ(d.token_id, "NULL");
    return d.reason;
  };
  EXPECT_EQ(refused(active, "newsletter", "NULL"), "unknown action 'newsletter'");
  EXPECT_EQ(refused(999999, "password_recovery", "NULL"), "unknown account");
  EXPECT_EQ(refused(provisioned, "password_recovery", "NULL"),
            "wrong account state: provisioned");
  EXPECT_EQ(refused(active, "activation", "NULL"), "wrong account state: active");
  EXPECT_EQ(refused(suspended, "password_recovery", "NULL"), "wrong account state: suspended");
  EXPECT_EQ(refused(active, "password_recovery", "'x@example.test'"),
            "password_recovery goes to the account's own address: give no address");
  EXPECT_EQ(Int("SELECT count(*) FROM mailroom.tokens WHERE account <> " +
                std::to_string(provisioned)),
            0);

  Exec("INSERT INTO mailroom.suppressions (address, reason) VALUES ('a@example.test', 'hard_bounce')");
  Decision d = Request(active, "password_recovery");
  EXPECT_EQ(d.decision, "suppressed");
  EXPECT_EQ(d.reason, "address suppressed: hard_bounce");
}

// Under the limits: the (limit+1)-th request in the window is rate limited, and says when the
// next one will be accepted: when the oldest counted request leaves the window.
TEST_F(InterfaceTest, RequestSaysWhenTheNextOneWillBeAccepted) {
  const int64_t a = Signup("limited", "active");
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) {
    Decision d = Request(a, "password_recovery");
    ASSERT_EQ(d.decision, "queued") << i;
    ids.push_back(d.token_id);
  }
  // The oldest counted request, backdated: the next is accepted 24 h after it.
  Exec(absl::StrCat("UPDATE mailroom.tokens SET created_at = created_at - 3600 WHERE id = ", ids[0]));
  Exec("UPDATE mailroom.mailroom_address_requests SET times[1] = times[1] - 3600");
  Decision d = Request(a, "password_recovery");
  EXPECT_EQ(d.decision, "rate_limited");
  EXPECT_NE(d.token_id, "NULL");
  EXPECT_EQ(Text(absl::StrCat("SELECT to_timestamp(created_at + 86400) = '", d.retry_at,
                              "'::timestamptz FROM mailroom.tokens WHERE id = ", ids[0])),
            "t");
  EXPECT_NE(d.reason.find("rate limited: 5 password_recovery requests for this account"),
            std::string::npos)
      << d.reason;
  // The rate-limited row is shown, never sent: consuming its token is invalid.
  EXPECT_EQ(Text("SELECT state FROM mailroom.account_emails WHERE token_id = " + d.token_id),
            "rate_limited");
  const auto [limited, limited_code] = Link(std::stoll(d.token_id));
  EXPECT_EQ(Consume(limited, limited_code), (Outcome{"invalid", "NULL", "NULL"}));
}

TEST_F(InterfaceTest, ConsumeActivatesAndSaysWhyItRefuses) {
  const int64_t a = Signup("act");
  const auto [token, code] = Link(ActivationToken(a));
  // Malformed, unknown, forged: invalid, with nothing to tell them apart.
  const Outcome invalid{"invalid", "NULL", "NULL"};
  EXPECT_EQ(Consume(""), invalid);
  EXPECT_EQ(Consume("not a token"), invalid);
  EXPECT_EQ(Consume(token.substr(0, 85)), invalid);
  EXPECT_EQ(Consume(token.substr(0, 85) + "B"), invalid);  // non-canonical last character
  std::string other = token;
  other[3] = other[3] == 'A' ? 'B' : 'A';  // another secret
  EXPECT_EQ(Consume(other), invalid);
  // The activation's code is optional, checked when given.
  EXPECT_EQ(Consume(token, code == "00000" ? "00001" : "00000"),
            (Outcome{"wrong_code", std::to_string(a), "activation"}));
  EXPECT_EQ(Consume(token), (Outcome{"ok", std::to_string(a), "activation"}));
  EXPECT_EQ(Text(absl::StrCat("SELECT status FROM mailroom.accounts WHERE id = ", a)), "active");
  EXPECT_EQ(Consume(token), (Outcome{"consumed", std::to_string(a), "activation"}));
  EXPECT_EQ(Text(absl::StrCat("SELECT state FROM mailroom.account_emails WHERE account = ", a)),
            "consumed");

  // Recovery: superseded by a newer request, expired, account suspended.
  const int64_t first = std::stoll(Request(a, "password_recovery").token_id);
  const int64_t second = std::stoll(Request(a, "password_recovery").token_id);
  auto [old_token, old_code] = Link(first);
  EXPECT_EQ(Consume(old_token, old_code), (Outcome{"superseded", std::to_string(a), "password_recovery"}));
  auto [token2, code2] = Link(second);
  App(absl::StrCat("UPDATE mailroom.accounts SET status = 'suspended' WHERE id = ", a));
  EXPECT_EQ(Consume(token2, code2), (Outcome{"account_state", std::to_string(a), "password_recovery"}));
  App(absl::StrCat("UPDATE mailroom.accounts SET status = 'active' WHERE id = ", a));
  Exec(absl::StrCat("UPDATE mailroom.tokens SET expires_at = extract(epoch FROM now())::bigint - 1"
                    " WHERE id = ", second));
  EXPECT_EQ(Consume(token2, code2), (Outcome{"expired", std::to_string(a), "password_recovery"}));
  EXPECT_EQ(Text(absl::StrCat("SELECT state FROM mailroom.account_emails WHERE token_id = ", second)),
            "expired");
}

// After N (consume_attempts_limit, 5) wrong codes the token is locked: the right code no longer
// works. A recovery's code is required.
TEST_F(InterfaceTest, WrongCodesLockTheToken) {
  const int64_t a = Signup("codes", "active");
  const auto [token, code] = Link(std::stoll(Request(a, "password_recovery").token_id));
  const std::string wrong = code == "00000" ? "00001" : "00000";
  const Outcome wrong_code{"wrong_code", std::to_string(a), "password_recovery"};
  EXPECT_EQ(Consume(token), wrong_code);  // missing: counted too
  for (int i = 0; i < 4; ++i) EXPECT_EQ(Consume(token, wrong), wrong_code) << i;
  EXPECT_EQ(Consume(token, code), (Outcome{"locked", std::to_string(a), "password_recovery"}));
  EXPECT_EQ(Int("SELECT wrong_codes FROM mailroom.tokens WHERE action = 'password_recovery'"), 5);

  // A fresh request works, and 4 wrong codes leave its right code working.
  const auto [token2, code2] = Link(std::stoll(Request(a, "password_recovery").token_id));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(Consume(token2, wrong == code2 ? code : wrong).outcome, "wrong_code");
  EXPECT_EQ(Consume(token2, code2), (Outcome{"ok", std::to_string(a), "password_recovery"}));
}

// The seeds' lifecycle, played by the application's role through the interface: a signup is
// provisioned, consuming its activation activates it (timestamps kept); suspended, it can
// neither activate nor recover; un-suspended before it ever activated it is provisioned again
// with a live activation token, which then works.
TEST_F(InterfaceTest, TheSeedsLifecycleThroughTheInterface) {
  const int64_t a = Signup("life");
  const std::string id = std::to_string(a);
  const auto [first, first_code] = Link(ActivationToken(a));
  App("UPDATE mailroom.accounts SET status = 'suspended' WHERE id = " + id);
  EXPECT_EQ(Consume(first), (Outcome{"account_state", id, "activation"}));
  EXPECT_EQ(Request(a, "activation").reason, "wrong account state: suspended");
  // Back from suspension, never activated: provisioned, and its first token still works.
  App("UPDATE mailroom.accounts SET status = 'active' WHERE id = " + id);
  EXPECT_EQ(Text("SELECT status FROM mailroom.accounts WHERE id = " + id), "provisioned");
  EXPECT_EQ(Int("SELECT count(*) FROM mailroom.tokens WHERE account = " + id), 1);
  // A second activation asked for: both are live, the newer one is consumed.
  const auto [second, second_code] = Link(std::stoll(Request(a, "activation").token_id));
  EXPECT_EQ(Consume(second), (Outcome{"ok", id, "activation"}));
  EXPECT_EQ(Text("SELECT status || ' ' || (activated_at IS NOT NULL)::text ||"
                 " ' ' || (status_changed_at = activated_at)::text"
                 " FROM mailroom.accounts WHERE id = " + id),
            "active true true");
  // The older one now finds the account active.
  EXPECT_EQ(Consume(first), (Outcome{"account_state", id, "activation"}));
  // Active: a recovery works; suspended meanwhile, its token does not.
  const auto [rec, rec_code] = Link(std::stoll(Request(a, "password_recovery").token_id));
  App("UPDATE mailroom.accounts SET status = 'suspended' WHERE id = " + id);
  EXPECT_EQ(Consume(rec, rec_code), (Outcome{"account_state", id, "password_recovery"}));
  App("UPDATE mailroom.accounts SET status = 'active' WHERE id = " + id);
  EXPECT_EQ(Text("SELECT status FROM mailroom.accounts WHERE id = " + id), "active");
  EXPECT_EQ(Consume(rec, rec_code), (Outcome{"ok", id, "password_recovery"}));
}

// A request's limits count the requests before it: only in READ COMMITTED, where a request
// waits for a concurrent one's commit and sees it.
TEST_F(InterfaceTest, RequestRefusesASnapshotThatCouldMissAConcurrentRequest) {
  const int64_t a = Signup("rr", "active");
  pqxx::transaction<pqxx::isolation_level::repeatable_read> tx(*app_);
  EXPECT_THROW(tx.exec(absl::StrCat("SELECT * FROM mailroom.request(", a,
                                    ", 'password_recovery')")),
               pqxx::sql_error);
}

// 1,000 tokens, each consumed by two connections at once: exactly one success per token.
TEST_F(InterfaceTest, EachTokenIsConsumedExactlyOnceUnderConcurrentClicks) {
  constexpr int kTokens = 1000;
  Exec(absl::StrCat("INSERT INTO mailroom.accounts (email, login, status) SELECT 'race' || i ||"
                    " '@example.test', 'race' || i, 'active' FROM generate_series(1, ", kTokens,
                    ") i"));
  App("SELECT count(*) FROM mailroom.accounts a, LATERAL mailroom.request(a.id, "
      "'password_recovery') r WHERE a.login LIKE 'race%'");
  std::vector<int64_t> ids;
  {
    pqxx::nontransaction tx(*conn_);
    for (const auto& row : tx.exec("SELECT id FROM mailroom.tokens ORDER BY id")) {
      ids.push_back(row[0].as<int64_t>());
    }
  }
  std::vector<std::pair<std::string, std::string>> links;
  for (int64_t id : ids) links.push_back(Link(id));
  ASSERT_EQ(links.size(), static_cast<size_t>(kTokens));
  std::vector<std::atomic<int>> ok(kTokens);
  std::atomic<int> consumed{0}, other{0};
  auto clicker = [&] {
    pqxx::connection c(testing::UrlAs(url_, "app"));
    for (int i = 0; i < kTokens; ++i) {
      Outcome o = Consume(c, links[i].first, links[i].second);
      if (o.outcome == "ok") ++ok[i];
      else if (o.outcome == "consumed") ++consumed;
      else ++other;
    }
  };
  std::thread a(clicker), b(clicker);
  a.join();
  b.join();
  int once = 0;
  for (auto& n : ok) once += n.load() == 1;
  EXPECT_EQ(once, kTokens);
  EXPECT_EQ(consumed.load(), kTokens);
  EXPECT_EQ(other.load(), 0);
  EXPECT_EQ(Int("SELECT count(*) FROM mailroom.tokens WHERE consumed_at IS NOT NULL"), kTokens);
}

// What happened to each email, as the application's role reads it.
TEST_F(InterfaceTest, AccountEmailsShowsEachEmailsState) {
  const int64_t a = Signup("view");
  auto state_of = [&](const std::string& where) {
    pqxx::result r = App("SELECT state FROM mailroom.account_emails WHERE " + where);
    return r.size() == 1 ? Field(r[0][0]) : absl::StrCat(r.size(), " rows");
  };
  EXPECT_EQ(state_of(absl::StrCat("account = ", a)), "0 rows");  // the signup, not collected
  const int64_t token = ActivationToken(a);
  EXPECT_EQ(state_of(absl::StrCat("token_id = ", token)), "queued");
  {
    pqxx::nontransaction tx(*conn_);
    ASSERT_EQ(tx.exec("SELECT * FROM mailroom.mailroom_dequeue('mailroom', 10, 'o', 60000)").size(), 1u);
  }
  EXPECT_EQ(state_of(absl::StrCat("token_id = ", token)), "sending");
  {
    pqxx::work tx(*conn_);
    tx.exec(absl::StrCat("SELECT * FROM mailroom.mailroom_ack('mailroom', 'o', ARRAY[", token,
                         "]::bigint[], ARRAY[1], ARRAY['sent'], ARRAY[''], ARRAY[0], ARRAY[0]::bigint[])"));
    tx.commit();
  }
  EXPECT_EQ(state_of(absl::StrCat("token_id = ", token)), "sent");
  EXPECT_EQ(App(absl::StrCat("SELECT address, state_at IS NOT NULL FROM mailroom.account_emails"
                             " WHERE token_id = ", token))[0][0].as<std::string>(),
            "view@example.test");
  Consume(Link(token).first);
  EXPECT_EQ(state_of(absl::StrCat("token_id = ", token)), "consumed");
}

}  // namespace
}  // namespace mailroom
