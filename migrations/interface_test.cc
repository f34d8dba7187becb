// The application's interface (mailroom.request, mailroom.consume, mailroom.account_emails)
// against a throwaway PostgreSQL, called as an application's role that has exactly the rights
// mailroom.grant_application gives.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <pqxx/pqxx>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "collector/dispatch/signing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sender/delivery/actions.h"
#include "testing/intruder.h"
#include "testing/migrated_database.h"

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
    return App(absl::StrCat("INSERT INTO mailroom.accounts (email, login, status) VALUES ('", login,
                            "@example.test', '", login, "', '", status, "') RETURNING id"))[0][0]
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
    pqxx::row r = tx.exec1(
        absl::StrCat("SELECT t.action, t.secret, t.code, k.carries_code FROM mailroom.tokens t"
                     " JOIN mailroom.actions k ON k.name = t.action WHERE t.id = ",
                     id));
    const TokenAction action = *ParseTokenAction(r[0].as<std::string>());
    const std::string code = r[2].as<std::string>();
    // As the collector signs it: the code only for an action that carries one.
    auto token = SignToken(*ParseSigningKey(kKey), action, pqxx::binarystring(r[1]).str(),
                           r[3].as<bool>() ? code : "");
    EXPECT_TRUE(token.ok());
    return {*token, code};
  }
  // An account that activated once (its activated_at set), as the seeds' lifecycle leaves it.
  int64_t Activated(const std::string& login) {
    const int64_t id = Signup(login, "active");
    Exec(absl::StrCat("UPDATE mailroom.accounts SET activated_at = 1 WHERE id = ", id));
    return id;
  }
  Outcome ConsumeCode(pqxx::connection& c, int64_t account, const std::string& action,
                      const std::string& code) {
    pqxx::nontransaction tx(c);
    pqxx::row r = tx.exec(absl::StrCat("SELECT * FROM mailroom.consume_code(", account, ", ",
                                       tx.quote(action), ", ", tx.quote(code), ")"))[0];
    return {Field(r[0]), Field(r[1]), Field(r[2])};
  }
  Outcome ConsumeCode(int64_t account, const std::string& action, const std::string& code) {
    return ConsumeCode(*app_, account, action, code);
  }
  int64_t Token(const Decision& d) {
    EXPECT_EQ(d.decision, "queued") << d.reason;
    return d.decision == "queued" ? std::stoll(d.token_id) : 0;
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
  EXPECT_EQ(rights,
            "account_emails:SELECT, accounts:INSERT, accounts:SELECT, accounts_id_seq:USAGE,"
            " action_rules:SELECT");
  pqxx::nontransaction tx(*conn_);
  pqxx::result fns = tx.exec(
      "SELECT p.proname FROM pg_proc p WHERE p.pronamespace = 'mailroom'::regnamespace"
      "   AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass"
      "                      AND d.objid = p.oid AND d.deptype = 'e')"
      "   AND has_function_privilege('app', p.oid, 'EXECUTE') ORDER BY 1");
  std::vector<std::string> names;
  for (const auto& row : fns) names.push_back(row[0].as<std::string>());
  // mailroom_random_code: the tokens' default, which runs as the inserting role.
  EXPECT_EQ(absl::StrJoin(names, ","),
            "consume,consume_code,email_events,email_history,mailroom_random_code,request");
  // Column UPDATE on accounts for the lifecycle, nothing on tokens.
  EXPECT_TRUE(tx.exec1("SELECT has_column_privilege('app', 'mailroom.accounts', 'status',"
                       " 'UPDATE')")[0]
                  .as<bool>());
  EXPECT_FALSE(tx.exec1("SELECT has_table_privilege('app', 'mailroom.tokens',"
                        " 'SELECT,INSERT,UPDATE,DELETE')")[0]
                   .as<bool>());
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
  EXPECT_EQ(refused(provisioned, "password_recovery", "NULL"), "wrong account state: provisioned");
  EXPECT_EQ(refused(active, "activation", "NULL"), "wrong account state: active");
  EXPECT_EQ(refused(suspended, "password_recovery", "NULL"), "wrong account state: suspended");
  EXPECT_EQ(refused(active, "password_recovery", "'x@example.test'"),
            "password_recovery goes to the account's own address: give no address");
  EXPECT_EQ(Int("SELECT count(*) FROM mailroom.tokens WHERE account <> " +
                std::to_string(provisioned)),
            0);

  Exec("INSERT INTO mailroom.suppressions (address, reason) VALUES ('a@example.test', "
       "'hard_bounce')");
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
  Exec(absl::StrCat("UPDATE mailroom.tokens SET created_at = created_at - 3600 WHERE id = ",
                    ids[0]));
  // The address's counted times, backdated alike (they are kept newest first, and the five
  // requests may fall on two seconds).
  Exec("UPDATE mailroom.mailroom_address_requests SET times = ARRAY(SELECT x - 3600"
       " FROM unnest(times) x)");
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
  EXPECT_EQ(Consume(old_token, old_code),
            (Outcome{"superseded", std::to_string(a), "password_recovery"}));
  auto [token2, code2] = Link(second);
  App(absl::StrCat("UPDATE mailroom.accounts SET status = 'suspended' WHERE id = ", a));
  EXPECT_EQ(Consume(token2, code2),
            (Outcome{"account_state", std::to_string(a), "password_recovery"}));
  App(absl::StrCat("UPDATE mailroom.accounts SET status = 'active' WHERE id = ", a));
  Exec(absl::StrCat("UPDATE mailroom.tokens SET expires_at = extract(epoch FROM now())::bigint - 1"
                    " WHERE id = ",
                    second));
  EXPECT_EQ(Consume(token2, code2), (Outcome{"expired", std::to_string(a), "password_recovery"}));
  EXPECT_EQ(Text(absl::StrCat("SELECT state FROM mailroom.account_emails WHERE token_id = ",
                              second)),
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
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(Consume(token2, wrong == code2 ? code : wrong).outcome, "wrong_code");
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
  EXPECT_EQ(Int("SELECT count(*) FROM mailroom.tokens WHERE action = 'activation' AND account = " +
                id),
            1);
  // A second activation asked for: both are live, the newer one is consumed.
  const auto [second, second_code] = Link(std::stoll(Request(a, "activation").token_id));
  EXPECT_EQ(Consume(second), (Outcome{"ok", id, "activation"}));
  EXPECT_EQ(Text("SELECT status || ' ' || (activated_at IS NOT NULL)::text ||"
                 " ' ' || (status_changed_at = activated_at)::text"
                 " FROM mailroom.accounts WHERE id = " +
                 id),
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
  EXPECT_THROW(tx.exec(
                   absl::StrCat("SELECT * FROM mailroom.request(", a, ", 'password_recovery')")),
               pqxx::sql_error);
}

// 1,000 tokens, each consumed by two connections at once: exactly one success per token.
TEST_F(InterfaceTest, EachTokenIsConsumedExactlyOnceUnderConcurrentClicks) {
  constexpr int kTokens = 1000;
  Exec(absl::StrCat("INSERT INTO mailroom.accounts (email, login, status) SELECT 'race' || i ||"
                    " '@example.test', 'race' || i, 'active' FROM generate_series(1, ",
                    kTokens, ") i"));
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
    ASSERT_EQ(tx.exec("SELECT * FROM mailroom.mailroom_dequeue('mailroom', 10, 'o', 60000)").size(),
              1u);
  }
  EXPECT_EQ(state_of(absl::StrCat("token_id = ", token)), "sending");
  {
    pqxx::work tx(*conn_);
    tx.exec(absl::StrCat(
        "SELECT * FROM mailroom.mailroom_ack('mailroom', 'o', ARRAY[", token,
        "]::bigint[], ARRAY[1], ARRAY['sent'], ARRAY[''], ARRAY[0], ARRAY[0]::bigint[])"));
    tx.commit();
  }
  EXPECT_EQ(state_of(absl::StrCat("token_id = ", token)), "sent");
  EXPECT_EQ(App(absl::StrCat("SELECT address, state_at IS NOT NULL FROM mailroom.account_emails"
                             " WHERE token_id = ",
                             token))[0][0]
                .as<std::string>(),
            "view@example.test");
  Consume(Link(token).first);
  EXPECT_EQ(state_of(absl::StrCat("token_id = ", token)), "consumed");
}

// A sent link past its expiry is `expired` from its expiry on (state_at), and keeps when it
// was sent (sent_at); a sent notice (no link) stays `sent`. A token with no delivery past its
// expiry says when it expired too. Emails of one second are ordered by their token's id.
TEST_F(InterfaceTest, AccountEmailsTellsASentLinkThatExpiredAndOrdersEachSecond) {
  const int64_t a = Activated("expiring");
  const int64_t link = Token(Request(a, "password_recovery"));
  const int64_t notice = Token(Request(a, "password_changed"));
  const int64_t unsent = Token(Request(a, "login_code"));
  {
    pqxx::work tx(*conn_);
    ASSERT_EQ(tx.exec("SELECT * FROM mailroom.mailroom_dequeue('mailroom', 10, 'o', 60000)").size(),
              3u);
    tx.exec(absl::StrCat("SELECT * FROM mailroom.mailroom_ack('mailroom', 'o', ARRAY[", link, ", ",
                         notice,
                         "]::bigint[], ARRAY[1, 1], ARRAY['sent', 'sent'], ARRAY['', ''],"
                         " ARRAY[0, 0], ARRAY[0, 0]::bigint[])"));
    tx.commit();
  }
  auto row = [&](int64_t token) {
    return Text(absl::StrCat("SELECT state || ' ' || (state_at = expires_at) || ' '"
                             " || (sent_at IS NOT NULL) FROM mailroom.account_emails"
                             " WHERE token_id = ",
                             token));
  };
  EXPECT_EQ(row(link), "sent false true");
  EXPECT_EQ(row(notice), "sent false true");
  // All three past their expiry; the login code is still leased.
  Exec(absl::StrCat("UPDATE mailroom.tokens SET expires_at = created_at - 1 WHERE account = ", a));
  EXPECT_EQ(row(link), "expired true true");
  EXPECT_EQ(row(notice), "sent false true");
  EXPECT_EQ(row(unsent), "sending false false");
  const int64_t queued = Token(Request(a, "email_change", "'expiring2@example.test'"));
  Exec(absl::StrCat("UPDATE mailroom.tokens SET expires_at = created_at - 1 WHERE id = ", queued));
  EXPECT_EQ(row(queued), "expired true false");
  // The documented query: four emails of (about) one second, newest first by their ids.
  Exec(absl::StrCat("UPDATE mailroom.tokens SET created_at = 1000 WHERE account = ", a));
  EXPECT_EQ(Text(absl::StrCat("SELECT string_agg(token_id::text, ',') FROM (SELECT token_id"
                              " FROM mailroom.account_emails WHERE account = ",
                              a, " ORDER BY requested_at DESC, token_id DESC) x")),
            absl::StrCat(queued, ",", unsent, ",", notice, ",", link));
  // The columns before sent_at are where they were.
  EXPECT_EQ(Text("SELECT string_agg(attname, ',' ORDER BY attnum) FROM pg_attribute"
                 " WHERE attrelid = 'mailroom.account_emails'::regclass AND attnum > 0"),
            "account,token_id,action,requested_at,expires_at,address,state,state_at,reason,"
            "sent_at");
}

// The application reads each action's rules (mailroom.action_rules), as mailroom applies them:
// the built-in values, and an operator's change at once (a 5-second activation to test an
// expiry locally).
TEST_F(InterfaceTest, TheApplicationReadsEachActionsRules) {
  auto rules = [&](const std::string& name) {
    pqxx::row r = App("SELECT concat_ws(' ', carries_secret, carries_code, code_alone,"
                      " coalesce(code_length::text, '-'), expiry_seconds, priority,"
                      " coalesce(account_status::text, 'any'),"
                      " coalesce(limit_per_account::text, '-'),"
                      " coalesce(limit_per_address::text, '-'), limit_window_seconds)"
                      " FROM mailroom.action_rules WHERE name = " +
                      app_->quote(name))[0];
    return Field(r[0]);
  };
  EXPECT_EQ(rules("activation"), "t f f - 900 normal provisioned 3 3 86400");
  EXPECT_EQ(rules("password_recovery"), "t t f 5 900 critical active 5 5 86400");
  EXPECT_EQ(rules("login_code"), "t t t 6 600 critical active 5 10 3600");
  EXPECT_EQ(rules("email_change"), "t f f - 3600 critical active 3 3 86400");
  EXPECT_EQ(rules("invitation"), "t f f - 604800 normal invited 3 3 86400");
  EXPECT_EQ(rules("password_changed"), "f f f - 86400 notice any 3 - 86400");
  EXPECT_EQ(App("SELECT count(*) FROM mailroom.action_rules")[0][0].as<int>(), 9);
  // The sender previews the built-in actions with these values without reading the database.
  for (const std::string& name : BuiltinActions()) {
    const ActionRules compiled = DefaultActionRules(name);
    pqxx::row r = App("SELECT coalesce(code_length, 6), expiry_seconds FROM mailroom.action_rules"
                      " WHERE name = " +
                      app_->quote(name))[0];
    EXPECT_EQ(r[0].as<int>(), compiled.code_length) << name;
    EXPECT_EQ(r[1].as<int64_t>(), absl::ToInt64Seconds(compiled.expiry)) << name;
  }
  Exec("UPDATE mailroom.actions SET expiry_seconds = 5 WHERE name = 'activation'");
  Exec("UPDATE mailroom.mailroom_settings SET limit_window_seconds = 7200");
  EXPECT_EQ(rules("activation"), "t f f - 5 normal provisioned 3 3 7200");
  EXPECT_EQ(rules("login_code"), "t t t 6 600 critical active 5 10 3600");
  const int64_t a = Signup("fiveseconds");
  EXPECT_EQ(Int(absl::StrCat("SELECT expires_at - created_at FROM mailroom.tokens WHERE id = ",
                             ActivationToken(a))),
            5);
  // Nothing else of the actions' table is the application's.
  EXPECT_THROW(App("SELECT * FROM mailroom.actions"), pqxx::sql_error);
}

// A role granted the interface before mailroom.action_rules existed (an upgrade from before
// 0043) may read it after `collector migrate`, with no new grant; reverting drops the view and
// puts back the grant function that does not name it.
TEST_F(InterfaceTest, AnUpgradeGivesTheApplicationsRoleTheActionRules) {
  ASSERT_TRUE(MigrateDown(url_, EmbeddedMigrations(), 42).ok());
  EXPECT_EQ(Int("SELECT count(*) FROM pg_class WHERE relname = 'action_rules'"), 0);
  Exec("SELECT mailroom.grant_application('app')");
  ASSERT_TRUE(MigrateUp(url_, EmbeddedMigrations()).ok());
  EXPECT_EQ(App("SELECT count(*) FROM mailroom.action_rules")[0][0].as<int>(), 9);
  EXPECT_EQ(Int("SELECT count(*) FROM information_schema.role_table_grants"
                " WHERE table_name = 'action_rules' AND grantee = 'app'"),
            1);
}

// A sign-in code: 6 digits (the action's code_length), a short expiry, critical; consumed with
// the link and its code, or with the code alone typed on another device (consume_code); a newer
// request supersedes the older; wrong codes are counted and the 5th locks the code for good.
TEST_F(InterfaceTest, LoginCodesAreConsumedOnceAndDieAfterTheWrongAttempts) {
  const int64_t a = Activated("login");
  const std::string id = std::to_string(a);
  const int64_t first = Token(Request(a, "login_code"));
  EXPECT_EQ(Text(absl::StrCat("SELECT char_length(code) || ' ' || (expires_at - created_at) || ' '"
                              " || priority FROM mailroom.tokens WHERE id = ",
                              first)),
            "6 600 critical");
  const auto [link, code] = Link(first);
  EXPECT_EQ(Consume(link), (Outcome{"wrong_code", id, "login_code"}));  // the code is required
  EXPECT_EQ(Consume(link, code), (Outcome{"ok", id, "login_code"}));
  EXPECT_EQ(Consume(link, code), (Outcome{"consumed", id, "login_code"}));
  // The code typed again, right or wrong: consumed, as the link clicked twice.
  EXPECT_EQ(ConsumeCode(a, "login_code", code), (Outcome{"consumed", id, "login_code"}));
  EXPECT_EQ(ConsumeCode(a, "login_code", code == "000000" ? "000001" : "000000"),
            (Outcome{"consumed", id, "login_code"}));

  // Typed on another device: the account's pending code. A newer request supersedes it.
  const auto [old_link, old_code] = Link(Token(Request(a, "login_code")));
  const auto [new_link, new_code] = Link(Token(Request(a, "login_code")));
  EXPECT_EQ(Consume(old_link, old_code), (Outcome{"superseded", id, "login_code"}));
  const std::string wrong = new_code == "000000" ? "000001" : "000000";
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(ConsumeCode(a, "login_code", wrong), (Outcome{"wrong_code", id, "login_code"}));
  }
  // The 5th wrong code (one more through the link) locks it: the right one no longer works.
  EXPECT_EQ(Consume(new_link, wrong), (Outcome{"wrong_code", id, "login_code"}));
  EXPECT_EQ(ConsumeCode(a, "login_code", new_code), (Outcome{"locked", id, "login_code"}));
  EXPECT_EQ(Consume(new_link, new_code), (Outcome{"locked", id, "login_code"}));
  // An action without a code, an account without a pending code: invalid.
  EXPECT_EQ(ConsumeCode(a, "email_change", "123456").outcome, "invalid");
  EXPECT_EQ(ConsumeCode(Activated("nocode"), "login_code", new_code).outcome, "invalid");
  // The account's limit (5 an hour): 3 made above, the 4th and 5th are accepted, the 6th
  // refused.
  EXPECT_EQ(Request(a, "login_code").decision, "queued");
  EXPECT_EQ(Request(a, "login_code").decision, "queued");
  const Decision limited = Request(a, "login_code");
  EXPECT_EQ(limited.decision, "rate_limited");
  EXPECT_EQ(limited.reason,
            "rate limited: 5 login_code requests for this account in the last 3600 s (limit 5)");
}

// An address change: the token goes to the new address; consuming it changes the account's
// address (the trigger) and queues the email_changed notice to the old one. The new address is
// refused when it is missing, malformed, the account's own or another account's.
TEST_F(InterfaceTest, EmailChangeMovesTheAccountAndTellsTheOldAddress) {
  const int64_t a = Activated("mover");
  const int64_t other = Activated("other");
  const std::string id = std::to_string(a);
  auto refusal = [&](const std::string& address) {
    Decision d = Request(a, "email_change", address);
    EXPECT_EQ(d.decision, "refused") << address;
    return d.reason;
  };
  EXPECT_EQ(refusal("NULL"), "email_change needs the new address");
  EXPECT_EQ(refusal("'not-an-address'"), "malformed address");
  EXPECT_EQ(refusal("' Mover@Example.test '"), "the account already has this address");
  EXPECT_EQ(refusal("'other@example.test'"), "address in use by another account");
  EXPECT_EQ(Request(other, "login_code", "'x@example.test'").reason,
            "login_code goes to the account's own address: give no address");

  const int64_t t = Token(Request(a, "email_change", "'New@Example.test'"));
  EXPECT_EQ(Text(absl::StrCat("SELECT to_address || ' ' || address || ' ' || priority"
                              " FROM mailroom.tokens WHERE id = ",
                              t)),
            "New@Example.test new@example.test critical");
  {
    pqxx::nontransaction tx(*conn_);
    pqxx::result jobs = tx.exec(
        "SELECT action, email, code FROM mailroom.mailroom_dequeue('mailroom', 10, 'o', 60000)");
    ASSERT_EQ(jobs.size(), 1u);
    EXPECT_EQ(jobs[0][0].as<std::string>(), "email_change");
    EXPECT_EQ(jobs[0][1].as<std::string>(), "New@Example.test");  // the new address
    EXPECT_TRUE(jobs[0][2].is_null());                            // no code: the link alone
  }
  const auto [link, code] = Link(t);
  EXPECT_EQ(Consume(link), (Outcome{"ok", id, "email_change"}));
  EXPECT_EQ(Text("SELECT email FROM mailroom.accounts WHERE id = " + id), "New@Example.test");
  EXPECT_EQ(Text("SELECT string_agg(action || ' ' || to_address || ' ' || address, ',')"
                 " FROM mailroom.tokens WHERE action = 'email_changed' AND account = " +
                 id),
            "email_changed mover@example.test mover@example.test");
  EXPECT_EQ(Consume(link), (Outcome{"consumed", id, "email_change"}));

  // Taken meanwhile by another account: the confirmation is refused and stays unconsumed.
  const auto [link2, code2] = Link(Token(Request(a, "email_change", "'later@example.test'")));
  App("UPDATE mailroom.accounts SET email = 'later@example.test' WHERE id = " +
      std::to_string(other));
  EXPECT_EQ(Consume(link2), (Outcome{"address_taken", id, "email_change"}));
  EXPECT_EQ(Text("SELECT email FROM mailroom.accounts WHERE id = " + id), "New@Example.test");
}

// An invited account: inserted 'invited', it queues no activation; its invitation (a week's
// expiry) activates it when consumed.
TEST_F(InterfaceTest, AnInvitationActivatesTheInvitedAccount) {
  const int64_t a = Signup("guest", "invited");
  const std::string id = std::to_string(a);
  CollectSignups();
  EXPECT_EQ(Int("SELECT count(*) FROM mailroom.tokens WHERE account = " + id), 0);
  EXPECT_EQ(Request(a, "activation").reason, "wrong account state: invited");
  EXPECT_EQ(Request(a, "password_recovery").reason, "wrong account state: invited");
  const int64_t t = Token(Request(a, "invitation"));
  EXPECT_EQ(Int(absl::StrCat("SELECT expires_at - created_at FROM mailroom.tokens WHERE id = ", t)),
            604800);
  EXPECT_EQ(Consume(Link(t).first), (Outcome{"ok", id, "invitation"}));
  EXPECT_EQ(Text("SELECT status || ' ' || (activated_at IS NOT NULL)::text"
                 " FROM mailroom.accounts WHERE id = " +
                 id),
            "active true");
  EXPECT_EQ(Request(a, "invitation").reason, "wrong account state: active");
}

// Notices carry no secret: requested (password_changed) for an account in any state, and no
// string of theirs is accepted by consume.
TEST_F(InterfaceTest, NoticesAreRequestedButNeverConsumed) {
  const int64_t a = Activated("notice");
  const int64_t t = Token(Request(a, "password_changed"));
  EXPECT_EQ(Consume(Link(t).first).outcome, "invalid");
  pqxx::nontransaction tx(*conn_);
  pqxx::result jobs = tx.exec(
      "SELECT action, secret, code, priority FROM mailroom.mailroom_dequeue('mailroom', 10, 'o',"
      " 60000)");
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0][0].as<std::string>(), "password_changed");
  EXPECT_TRUE(jobs[0][1].is_null());
  EXPECT_TRUE(jobs[0][2].is_null());
  EXPECT_EQ(jobs[0][3].as<std::string>(), "notice");
}

// 1,000 status changes of one account (500 suspensions, 500 reactivations) yield 6 notices:
// each notice's limit is 3 per account a day, the rest are kept rate limited and never sent.
TEST_F(InterfaceTest, AFloodOfStatusChangesYieldsAtMostSixNotices) {
  const int64_t a = Activated("flood");
  const std::string id = std::to_string(a);
  for (int i = 0; i < 500; ++i) {
    App("UPDATE mailroom.accounts SET status = 'suspended' WHERE id = " + id);
    App("UPDATE mailroom.accounts SET status = 'active' WHERE id = " + id);
  }
  EXPECT_EQ(Int("SELECT count(*) FROM mailroom.tokens WHERE account = " + id), 1000);
  EXPECT_EQ(Text("SELECT string_agg(action || ' ' || n, ',' ORDER BY action) FROM (SELECT action,"
                 " count(*) n FROM mailroom.tokens WHERE NOT rate_limited AND account = " +
                 id + " GROUP BY action) x"),
            "account_reactivated 3,account_suspended 3");
  pqxx::nontransaction tx(*conn_);
  EXPECT_EQ(tx.exec("SELECT * FROM mailroom.mailroom_dequeue('mailroom', 2000, 'o', 60000)").size(),
            6u);
}

// Two connections consume each of 200 sign-in codes and 200 address changes at once: exactly
// one success per token, and one email_changed notice per account.
TEST_F(InterfaceTest, LoginCodesAndEmailChangesAreConsumedExactlyOnceUnderRaces) {
  constexpr int kAccounts = 200;
  Exec(absl::StrCat("INSERT INTO mailroom.accounts (email, login, status, activated_at) SELECT"
                    " 'race' || i || '@example.test', 'race' || i, 'active', 1"
                    " FROM generate_series(1, ",
                    kAccounts, ") i"));
  App("SELECT count(*) FROM mailroom.accounts a, LATERAL mailroom.request(a.id, 'login_code') r"
      " WHERE a.login LIKE 'race%'");
  App("SELECT count(*) FROM mailroom.accounts a, LATERAL mailroom.request(a.id, 'email_change',"
      " 'moved-' || a.email) r WHERE a.login LIKE 'race%'");
  std::vector<std::pair<std::string, std::string>> links;
  std::vector<int64_t> ids;
  {
    pqxx::nontransaction tx(*conn_);
    for (const auto& row : tx.exec("SELECT id FROM mailroom.tokens ORDER BY id")) {
      ids.push_back(row[0].as<int64_t>());
    }
  }
  for (int64_t t : ids) links.push_back(Link(t));
  ASSERT_EQ(links.size(), static_cast<size_t>(2 * kAccounts));
  std::vector<std::atomic<int>> ok(links.size());
  std::atomic<int> consumed{0}, other{0};
  auto clicker = [&] {
    pqxx::connection c(testing::UrlAs(url_, "app"));
    for (size_t i = 0; i < links.size(); ++i) {
      // A login code's link comes with its code, a change's alone.
      const bool code = i < static_cast<size_t>(kAccounts);
      Outcome o = Consume(c, links[i].first, code ? links[i].second : "");
      if (o.outcome == "ok") ++ok[i];
      else if (o.outcome == "consumed") ++consumed;
      else ++other;
    }
  };
  std::thread x(clicker), y(clicker);
  x.join();
  y.join();
  int once = 0;
  for (auto& n : ok) once += n.load() == 1;
  EXPECT_EQ(once, 2 * kAccounts);
  EXPECT_EQ(consumed.load(), 2 * kAccounts);
  EXPECT_EQ(other.load(), 0);
  EXPECT_EQ(Int("SELECT count(*) FROM mailroom.accounts WHERE email LIKE 'moved-race%'"),
            kAccounts);
  EXPECT_EQ(Int("SELECT count(*) FROM mailroom.tokens WHERE action = 'email_changed'"), kAccounts);
}

// Two accounts confirm the same new address at once: one gets it, the other is told
// address_taken (not an error), whichever commits first.
TEST_F(InterfaceTest, TwoAccountsRacingForOneAddressEndWithOneOwner) {
  const int64_t a = Activated("ra"), b = Activated("rb");
  const auto la = Link(Token(Request(a, "email_change", "'same@example.test'"))).first;
  const auto lb = Link(Token(Request(b, "email_change", "'same@example.test'"))).first;
  Outcome oa, ob;
  std::thread x([&] {
    pqxx::connection c(testing::UrlAs(url_, "app"));
    oa = Consume(c, la, "");
  });
  std::thread y([&] {
    pqxx::connection c(testing::UrlAs(url_, "app"));
    ob = Consume(c, lb, "");
  });
  x.join();
  y.join();
  EXPECT_EQ(absl::StrJoin({oa.outcome, ob.outcome}, ","),
            oa.outcome == "ok" ? "ok,address_taken" : "address_taken,ok");
  EXPECT_EQ(Int("SELECT count(*) FROM mailroom.accounts WHERE email = 'same@example.test'"), 1);
}

// An action of the application's own, added with one INSERT into an installed database: the
// application requests it by name, the dequeue hands it out under its name, its token is signed
// with its own domain ("/action/" || name || "/", the code appended) and consumed.
TEST_F(InterfaceTest, ACustomActionIsRequestedDequeuedSignedWithItsDomainAndConsumed) {
  Exec("INSERT INTO mailroom.actions (name, carries_code, code_length, expiry_seconds, priority,"
       " account_status) VALUES ('document_signature', true, 8, 3600, 'normal', 'active')");
  const int64_t a = Activated("custom");
  const int64_t t = Token(Request(a, "document_signature"));
  pqxx::result jobs = pqxx::nontransaction(*conn_).exec(
      "SELECT action, secret, code, priority FROM mailroom.mailroom_dequeue('mailroom', 10, 'o',"
      " 60000)");
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0][0].as<std::string>(), "document_signature");
  const std::string secret = pqxx::binarystring(jobs[0][1]).str();
  const std::string code = jobs[0][2].as<std::string>();
  EXPECT_EQ(code.size(), 8u);
  const auto [link, link_code] = Link(t);
  EXPECT_EQ(link_code, code);
  // The signature is HMAC-SHA256(key, "/action/document_signature/" || secret || code).
  const SigningKey key = *ParseSigningKey(kKey);
  std::string raw;
  ASSERT_TRUE(absl::WebSafeBase64Unescape(link, &raw));
  EXPECT_EQ(raw.substr(32),
            HmacSha256(absl::string_view(reinterpret_cast<const char*>(key.bytes.data()), 32),
                       absl::StrCat("/action/document_signature/", secret, code)));
  EXPECT_TRUE(VerifyToken({key}, *ParseTokenAction("document_signature"), link, code).ok());
  EXPECT_FALSE(VerifyToken({key}, *ParseTokenAction("login_code"), link, code).ok());
  EXPECT_EQ(Consume(link, code), (Outcome{"ok", std::to_string(a), "document_signature"}));
}

// A password recovery's code never stands alone: typed without the link it is `invalid`, so
// the recovery keeps its two factors (the link's 256-bit secret and the code); with the link it
// works. login_code's may be typed alone (mailroom.actions.code_alone).
TEST_F(InterfaceTest, ARecoveryCodeAloneConsumesNothing) {
  const int64_t a = Activated("twofactor");
  const auto [link, code] = Link(Token(Request(a, "password_recovery")));
  EXPECT_EQ(ConsumeCode(a, "password_recovery", code).outcome, "invalid");
  EXPECT_EQ(Int("SELECT count(*) FROM mailroom.tokens WHERE consumed_at IS NOT NULL"), 0);
  EXPECT_EQ(Consume(link, code), (Outcome{"ok", std::to_string(a), "password_recovery"}));
  EXPECT_EQ(Text("SELECT string_agg(name, ',' ORDER BY name) FROM mailroom.actions"
                 " WHERE code_alone"),
            "login_code");
  // The operator cannot make a recovery's code stand alone.
  EXPECT_THROW(Exec("UPDATE mailroom.actions SET code_alone = true"
                    " WHERE name = 'password_recovery'"),
               pqxx::check_violation);
}

// The application's role guesses a sign-in code with every guess rolled back (each in an
// EXCEPTION block, and the whole block rolled back at the end): it gets exactly
// consume_attempts_limit (5) answers of wrong_code, then `locked`, and the right code, given
// afterwards, finds the token locked. The same with whole transactions rolled back, and
// through the link. Per account and hour: 5 guesses per token times the action's 5 requests.
TEST_F(InterfaceTest, WrongCodesRolledBackByTheCallerStillLockTheToken) {
  const int64_t a = Activated("guessed");
  const std::string id = std::to_string(a);
  const auto [link, code] = Link(Token(Request(a, "login_code")));
  const int n = std::stoi(code) < 1000 ? 999 : 1000;
  try {
    App(absl::StrCat(
        "DO $$ DECLARE o text; w int := 0; l int := 0; x int := 0; BEGIN"
        " FOR i IN 0..999 LOOP"
        "  CONTINUE WHEN lpad(i::text, 6, '0') = '",
        code,
        "';"
        "  BEGIN"
        "   SELECT c.outcome INTO o FROM mailroom.consume_code(",
        a,
        ", 'login_code', lpad(i::text, 6, '0')) c;"
        "   RAISE EXCEPTION USING MESSAGE = o;"
        "  EXCEPTION WHEN raise_exception THEN"
        "   IF SQLERRM = 'wrong_code' THEN w := w + 1; ELSIF SQLERRM = 'locked' THEN l := l + 1;"
        "   ELSE x := x + 1; END IF;"
        "  END;"
        " END LOOP;"
        " RAISE EXCEPTION 'guesses wrong=% locked=% other=%', w, l, x;"
        "END $$"));
    ADD_FAILURE() << "the block ended without its error";
  } catch (const pqxx::sql_error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  absl::StrCat("guesses wrong=5 locked=", n - 5, " other=0")),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(ConsumeCode(a, "login_code", code), (Outcome{"locked", id, "login_code"}));
  EXPECT_EQ(Consume(link, code), (Outcome{"locked", id, "login_code"}));
  EXPECT_EQ(Int("SELECT count(*) FROM mailroom.tokens WHERE consumed_at IS NOT NULL"), 0);

  // Whole transactions rolled back, by code alone and through the link.
  auto rolled_back = [&](const std::string& call) {
    pqxx::work tx(*app_);
    const std::string outcome = tx.exec1(call)[0].as<std::string>();
    tx.abort();
    return outcome;
  };
  const auto [link2, code2] = Link(Token(Request(a, "login_code")));
  const std::string wrong2 = code2 == "000000" ? "000001" : "000000";
  std::vector<std::string> outcomes;
  for (int i = 0; i < 6; ++i) {
    outcomes.push_back(rolled_back(absl::StrCat("SELECT outcome FROM mailroom.consume_code(", a,
                                                ", 'login_code', '", wrong2, "')")));
  }
  EXPECT_EQ(absl::StrJoin(outcomes, ","),
            "wrong_code,wrong_code,wrong_code,wrong_code,wrong_code,locked");
  EXPECT_EQ(Consume(link2, code2).outcome, "locked");
  const int64_t b = Activated("guessedlink");
  const auto [link3, code3] = Link(Token(Request(b, "password_recovery")));
  const std::string wrong3 = code3 == "00000" ? "00001" : "00000";
  outcomes.clear();
  for (int i = 0; i < 6; ++i) {
    outcomes.push_back(rolled_back(
        absl::StrCat("SELECT outcome FROM mailroom.consume('", link3, "', '", wrong3, "')")));
  }
  EXPECT_EQ(absl::StrJoin(outcomes, ","),
            "wrong_code,wrong_code,wrong_code,wrong_code,wrong_code,locked");
  EXPECT_EQ(Consume(link3, code3).outcome, "locked");

  // The account's hour: 3 more requests (5 in all, the action's limit), 5 guesses each.
  int guesses = 0;
  for (int r = 0; r < 3; ++r) {
    const auto [l, c] = Link(Token(Request(a, "login_code")));
    const std::string w = c == "000000" ? "000001" : "000000";
    for (int i = 0; i < 6; ++i) {
      guesses += rolled_back(absl::StrCat("SELECT outcome FROM mailroom.consume_code(", a,
                                          ", 'login_code', '", w, "')")) == "wrong_code";
    }
  }
  EXPECT_EQ(guesses, 15);
  EXPECT_EQ(Request(a, "login_code").decision, "rate_limited");
}

// One address, one account: addresses are compared as lower(btrim(email)) by the unique index,
// so a second account cannot take another's address in another spelling, and two accounts
// confirming one new address in two spellings at once end with one owner (100 such pairs: one
// `ok` and one `address_taken` each).
TEST_F(InterfaceTest, OneAddressIsOneAccountInEverySpelling) {
  Signup("bob");
  EXPECT_THROW(App("INSERT INTO mailroom.accounts (email, login)"
                   " VALUES ('Bob@Example.TEST', 'bob2')"),
               pqxx::unique_violation);
  EXPECT_THROW(App("INSERT INTO mailroom.accounts (email, login)"
                   " VALUES (' bob@example.test ', 'bob3')"),
               pqxx::unique_violation);

  constexpr int kPairs = 100;
  Exec(absl::StrCat("INSERT INTO mailroom.accounts (email, login, status, activated_at) SELECT"
                    " 'pair' || i || '@example.test', 'pair' || i, 'active', 1"
                    " FROM generate_series(0, ",
                    2 * kPairs - 1, ") i"));
  // Account 2k asks for target<k>@, account 2k+1 for TARGET<k>@ (both pending: neither is taken
  // before a confirmation).
  App("SELECT count(*) FROM mailroom.accounts a, LATERAL mailroom.request(a.id, 'email_change',"
      " CASE WHEN substr(a.login, 5)::int % 2 = 0 THEN 'target' ELSE 'TARGET' END"
      " || (substr(a.login, 5)::int / 2) || '@Example.test') r WHERE a.login LIKE 'pair%'");
  std::vector<std::string> even(kPairs), odd(kPairs);
  std::vector<std::pair<int, int64_t>> tokens;
  {
    pqxx::nontransaction tx(*conn_);
    for (const auto& row : tx.exec("SELECT substr(a.login, 5)::int, t.id FROM mailroom.tokens t"
                                   " JOIN mailroom.accounts a ON a.id = t.account"
                                   " WHERE t.action = 'email_change' AND a.login LIKE 'pair%'")) {
      tokens.emplace_back(row[0].as<int>(), row[1].as<int64_t>());
    }
  }
  ASSERT_EQ(tokens.size(), static_cast<size_t>(2 * kPairs));
  for (const auto& [i, t] : tokens) (i % 2 == 0 ? even : odd)[i / 2] = Link(t).first;
  std::vector<std::string> a_out(kPairs), b_out(kPairs);
  auto clicker = [&](const std::vector<std::string>& links, std::vector<std::string>* out) {
    pqxx::connection c(testing::UrlAs(url_, "app"));
    for (int k = 0; k < kPairs; ++k) (*out)[k] = Consume(c, links[k], "").outcome;
  };
  std::thread x(clicker, std::cref(even), &a_out), y(clicker, std::cref(odd), &b_out);
  x.join();
  y.join();
  int pairs_right = 0;
  for (int k = 0; k < kPairs; ++k) {
    const std::string both = a_out[k] + "," + b_out[k];
    pairs_right += both == "ok,address_taken" || both == "address_taken,ok";
    EXPECT_TRUE(both == "ok,address_taken" || both == "address_taken,ok") << k << ": " << both;
  }
  EXPECT_EQ(pairs_right, kPairs);
  EXPECT_EQ(Int("SELECT count(DISTINCT lower(email)) FROM mailroom.accounts"
                " WHERE lower(email) LIKE 'target%'"),
            kPairs);
  EXPECT_EQ(Int("SELECT count(*) FROM mailroom.accounts WHERE lower(email) LIKE 'target%'"),
            kPairs);
}

// The limits count a mailbox's sub-addresses as the mailbox: victim+1..8@ share victim@'s
// activation limit (3 per address), as do gmail.com's dotted spellings and googlemail.com;
// the recovery's limit per address (5) likewise. Accounts and their emails keep the address as
// given.
TEST_F(InterfaceTest, SubAddressesShareTheirMailboxsLimit) {
  App("INSERT INTO mailroom.accounts (email, login) SELECT 'victim+' || i || '@Example.test',"
      " 'victim' || i FROM generate_series(1, 8) i");
  App("INSERT INTO mailroom.accounts (email, login) VALUES ('g.mail.user@gmail.com', 'g1'),"
      " ('gmailuser+x@googlemail.com', 'g2'), ('GMailUser@gmail.com', 'g3'),"
      " ('gmail.user+y@gmail.com', 'g4')");
  CollectSignups();
  EXPECT_EQ(Text("SELECT count(*) FILTER (WHERE NOT rate_limited) || ' '"
                 " || count(*) FILTER (WHERE rate_limited) FROM mailroom.tokens t"
                 " JOIN mailroom.accounts a ON a.id = t.account WHERE a.login LIKE 'victim%'"),
            "3 5");
  EXPECT_EQ(Text("SELECT count(*) FILTER (WHERE NOT rate_limited) || ' '"
                 " || count(*) FILTER (WHERE rate_limited) FROM mailroom.tokens t"
                 " JOIN mailroom.accounts a ON a.id = t.account WHERE a.login LIKE 'g_'"),
            "3 1");
  EXPECT_EQ(Text("SELECT address FROM mailroom.tokens t JOIN mailroom.accounts a"
                 " ON a.id = t.account WHERE a.login = 'victim7'"),
            "victim+7@example.test");
  // A request (the limits trigger): password_recovery's 5 per address.
  Exec("INSERT INTO mailroom.accounts (email, login, status, activated_at) SELECT"
       " 'rec+' || i || '@example.test', 'rec' || i, 'active', 1 FROM generate_series(1, 6) i");
  std::vector<std::string> decisions;
  for (int i = 1; i <= 6; ++i) {
    decisions.push_back(
        Request(Int(absl::StrCat("SELECT id FROM mailroom.accounts WHERE login = 'rec", i, "'")),
                "password_recovery")
            .decision);
  }
  EXPECT_EQ(absl::StrJoin(decisions, ","), "queued,queued,queued,queued,queued,rate_limited");
}

// An address that is not a mailbox the sender can send to (a control character, a space, no
// '@', a quoted or non-ASCII local part, a one-label domain, a local part over 64 characters)
// is refused at every entry: a signup, an UPDATE of the address, and email_change's request.
TEST_F(InterfaceTest, AddressesThatAreNotMailboxesAreRefusedAtEveryEntry) {
  const std::string bad[] = {"E'a\\x01b@example.test'",
                             "E'a\\tb@example.test'",
                             "'a b@example.test'",
                             "'not-an-address'",
                             "'\"quoted\"@example.test'",
                             "'j\u00fcrgen@example.test'",
                             "'user@localhost'",
                             "'a..b@example.test'",
                             "'a@-x.example.test'",
                             "'" + std::string(65, 'l') + "@example.test'",
                             "E'a@example.test\\r\\nBcc: x@evil.test'"};
  int refused = 0;
  for (const std::string& address : bad) {
    try {
      App("INSERT INTO mailroom.accounts (email, login) VALUES (" + address + ", 'bad')");
      ADD_FAILURE() << address << " was accepted";
    } catch (const pqxx::check_violation& e) {
      ++refused;
      EXPECT_NE(std::string(e.what()).find("invalid email address: "), std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(refused, static_cast<int>(std::size(bad)));
  // Surrounding spaces aside, every RFC 5321 dot-atom is a mailbox.
  Signup("fine");
  App("INSERT INTO mailroom.accounts (email, login) VALUES"
      " (' o''brien+tag@mail.example.test ', 'obrien'), ('x_y.z!#$%&*=?^`{|}~-@a-b.c9', 'sym')");
  const int64_t a = Activated("mover2");
  EXPECT_THROW(App(absl::StrCat("UPDATE mailroom.accounts SET email = E'mover2\\x01@example.test'"
                                " WHERE id = ",
                                a)),
               pqxx::check_violation);
  for (const std::string& address : bad) {
    EXPECT_EQ(Request(a, "email_change", address).reason, "malformed address") << address;
  }
  // 255 characters, every part within its own limit (the accounts' column holds 254 at most).
  EXPECT_EQ(Request(a, "email_change",
                    "'" + std::string(64, 'l') + "@" + std::string(63, 'a') + "." +
                        std::string(63, 'b') + "." + std::string(58, 'c') + ".test'")
                .reason,
            "malformed address");
  EXPECT_EQ(Int("SELECT count(*) FROM mailroom.tokens WHERE action = 'email_change'"), 0);
  // A row from before the rule (put in here with the check switched off) is checked only when
  // its address is set again: its status still changes.
  Exec("ALTER TABLE mailroom.accounts DISABLE TRIGGER before_account_email_check;"
       " INSERT INTO mailroom.accounts (email, login, status, activated_at)"
       " VALUES ('legacy@localhost', 'legacy', 'active', 1);"
       " ALTER TABLE mailroom.accounts ENABLE TRIGGER before_account_email_check");
  App("UPDATE mailroom.accounts SET status = 'suspended', locale = 'de' WHERE login = 'legacy'");
  EXPECT_EQ(Text("SELECT status FROM mailroom.accounts WHERE login = 'legacy'"), "suspended");
  EXPECT_THROW(App("UPDATE mailroom.accounts SET email = 'still@localhost'"
                   " WHERE login = 'legacy'"),
               pqxx::check_violation);
}

// Every change of an account's address is told to the old one, whoever made it: the
// application's own UPDATE queues the email_changed notice to the old address exactly as a
// confirmed email_change does, so a recovery sent to an address changed behind the user's back
// is never the only email. A change of spelling only (case, spaces) is no change.
TEST_F(InterfaceTest, ADirectChangeOfAddressIsToldToTheOldOne) {
  const int64_t a = Activated("direct");
  App(absl::StrCat("UPDATE mailroom.accounts SET email = 'attacker@evil.test' WHERE id = ", a));
  EXPECT_EQ(Text(absl::StrCat("SELECT string_agg(action || ' ' || to_address, ',')"
                              " FROM mailroom.tokens WHERE account = ",
                              a)),
            "email_changed direct@example.test");
  App(absl::StrCat("UPDATE mailroom.accounts SET email = ' Attacker@Evil.test' WHERE id = ", a));
  EXPECT_EQ(Int(absl::StrCat("SELECT count(*) FROM mailroom.tokens WHERE account = ", a)), 1);
  // The notice goes to the old address as a mailbox, without the spaces it was stored with.
  App(absl::StrCat("UPDATE mailroom.accounts SET email = 'back@evil.test' WHERE id = ", a));
  EXPECT_EQ(Text(absl::StrCat("SELECT to_address FROM mailroom.tokens WHERE account = ", a,
                              " ORDER BY id DESC LIMIT 1")),
            "Attacker@Evil.test");
  App(absl::StrCat("UPDATE mailroom.accounts SET email = 'attacker@evil.test' WHERE id = ", a));
  // The recovery that follows goes to the new address; the old one heard of the change first.
  const int64_t r = Token(Request(a, "password_recovery"));
  EXPECT_EQ(Text(absl::StrCat("SELECT string_agg(action, ',' ORDER BY id) FROM mailroom.tokens"
                              " WHERE account = ",
                              a, " AND id <= ", r)),
            "email_changed,email_changed,email_changed,password_recovery");
  // Accounts made to take an address and leave it: the old address's limit (3 a day) bounds
  // what it is sent.
  for (int i = 0; i < 6; ++i) {
    const int64_t b = App(absl::StrCat("INSERT INTO mailroom.accounts (email, login, status,"
                                       " activated_at) VALUES ('target@victim.test', 'taker",
                                       i, "', 'active', 1) RETURNING id"))[0][0]
                          .as<int64_t>();
    App(absl::StrCat("UPDATE mailroom.accounts SET email = 'left", i,
                     "@evil.test' WHERE id = ", b));
  }
  EXPECT_EQ(Text("SELECT count(*) FILTER (WHERE NOT rate_limited) || ' '"
                 " || count(*) FILTER (WHERE rate_limited) FROM mailroom.tokens"
                 " WHERE action = 'email_changed' AND to_address = 'target@victim.test'"),
            "3 3");
}

// A transaction begun before a token's expiry and kept open past it consumes nothing: the
// expiry is the clock's, not the transaction's start, and a token whose counter another token
// has taken since answers `expired` without comparing the code. Its guesses rolled back in that
// transaction all answer `expired`, the right code too.
TEST_F(InterfaceTest, ATokenPastItsExpiryIsExpiredInATransactionBegunBefore) {
  const int64_t a = Activated("late");
  const int64_t t = Token(Request(a, "login_code"));
  const std::string code = Link(t).second;
  const std::string wrong = code == "000000" ? "000001" : "000000";
  pqxx::connection c(testing::UrlAs(url_, "app"));
  pqxx::work s1(c);
  s1.exec("SELECT now()");  // the transaction's time is fixed from here
  const int64_t at = Int("SELECT extract(epoch FROM clock_timestamp())::bigint + 1");
  // The token expires a second from now, and its counter is then the only free one.
  Exec(absl::StrCat("UPDATE mailroom.tokens SET expires_at = ", at, " WHERE id = ", t,
                    "; UPDATE mailroom.code_counters SET free_at = CASE WHEN token = ", t, " THEN ",
                    at, " ELSE 4102444800 END"));
  while (Int("SELECT extract(epoch FROM clock_timestamp())::bigint") < at) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  const int64_t other = Activated("takes");
  const int64_t t2 = Token(Request(other, "login_code"));
  EXPECT_EQ(Int(absl::StrCat("SELECT code_slot FROM mailroom.tokens WHERE id = ", t2)),
            Int(absl::StrCat("SELECT code_slot FROM mailroom.tokens WHERE id = ", t)));
  std::vector<std::string> outcomes;
  for (const std::string& guess : {wrong, wrong, wrong, wrong, wrong, wrong, code}) {
    pqxx::subtransaction sub(s1);
    outcomes.push_back(sub.exec1(absl::StrCat("SELECT outcome FROM mailroom.consume_code(", a,
                                              ", 'login_code', '", guess, "')"))[0]
                           .as<std::string>());
    sub.abort();
  }
  EXPECT_EQ(absl::StrJoin(outcomes, ","),
            "expired,expired,expired,expired,expired,expired,expired");
  s1.abort();
}

// A counter whose token is being checked (a consume holds its row) is never given to a new
// token, even once it is free by the clock: the new token starts from its own counter, and the
// old token's wrong codes in that open transaction never count against it.
TEST_F(InterfaceTest, ACounterBeingCheckedIsNeverGivenToANewToken) {
  const int64_t a = Activated("holder");
  const int64_t v = Activated("victim2");
  const int64_t t = Token(Request(a, "login_code"));
  const std::string code = Link(t).second;
  const std::string wrong = code == "000000" ? "000001" : "000000";
  // Every counter free by the clock, the token's own first in line.
  Exec(absl::StrCat("UPDATE mailroom.code_counters SET free_at = CASE WHEN token = ", t,
                    " THEN -1 ELSE 0 END"));
  pqxx::connection c(testing::UrlAs(url_, "app"));
  pqxx::work s1(c);
  const std::string guess = absl::StrCat("SELECT outcome FROM mailroom.consume_code(", a,
                                         ", 'login_code', '", wrong, "')");
  EXPECT_EQ(s1.exec1(guess)[0].as<std::string>(), "wrong_code");
  const int64_t r = Token(Request(v, "password_recovery"));
  EXPECT_NE(Int(absl::StrCat("SELECT code_slot FROM mailroom.tokens WHERE id = ", r)),
            Int(absl::StrCat("SELECT code_slot FROM mailroom.tokens WHERE id = ", t)));
  for (int i = 0; i < 5; ++i) s1.exec(guess);
  s1.commit();
  const auto [link, recovery_code] = Link(r);
  EXPECT_EQ(Consume(link, recovery_code).outcome, "ok");
}

// --- The application's event feed (mailroom.email_events, mailroom_email_events) -------------

// One event of the feed as the application reads it.
struct Event {
  int64_t event_id = 0, token_id = 0, account = 0;
  std::string action, event, detail;
};

// The feed from `after`, at most `limit` events, as the application's role reads it.
std::vector<Event> ReadEvents(pqxx::connection& c, int64_t after, int limit) {
  pqxx::nontransaction tx(c);
  std::vector<Event> events;
  for (const auto& r : tx.exec(absl::StrCat(
           "SELECT event_id, token_id, account, action, event, coalesce(detail, 'NULL')"
           " FROM mailroom.email_events(",
           after, ", ", limit, ")"))) {
    events.push_back({r[0].as<int64_t>(), r[1].as<int64_t>(), r[2].as<int64_t>(),
                      r[3].as<std::string>(), r[4].as<std::string>(), r[5].as<std::string>()});
  }
  return events;
}

// The collector's publisher: every staged event into the feed.
int64_t PublishAll(pqxx::connection& c) {
  int64_t n = 0;
  for (;;) {
    pqxx::nontransaction tx(c);
    pqxx::row r = tx.exec1("SELECT * FROM mailroom.mailroom_publish_events(1000)");
    n += r[0].as<int64_t>();
    if (!r[2].as<bool>()) return n;
  }
}

// Every kind of event once for its email, with its account, action and detail: a plain SENT
// (no row of its own), a SENT with the provider's message id, FAILED and EXPIRED outcomes, a
// token skipped because its address is suppressed and one that expired unsent, and the
// feedback of matched deliveries, each kind counted once per delivery (delivered reported twice,
// the second time through the job's tags, which gives a batch job a row without staging its
// SENT again).
TEST_F(InterfaceTest, EachEventOfAnEmailReachesTheFeedOnceWithItsFields) {
  std::vector<int64_t> accounts, tokens;
  for (int i = 0; i < 8; ++i) {
    accounts.push_back(Activated(absl::StrCat("ev", i)));
    if (i < 5) tokens.push_back(Token(Request(accounts[i], "password_recovery")));
  }
  ASSERT_EQ(Dequeue(10).size(), 5u);
  Exec(absl::StrCat(
      "SELECT * FROM mailroom.mailroom_ack('mailroom', 's', ARRAY[", tokens[0], ", ", tokens[1],
      ", ", tokens[2], ", ", tokens[3], ", ", tokens[4],
      "]::bigint[], ARRAY[1, 1, 1, 1, 1], ARRAY['sent', 'sent', 'sent', 'failed', 'expired'],"
      " ARRAY['', '', '', '550 no such user', 'too late'], ARRAY[0, 0, 0, 0, 0],"
      " ARRAY[0, 0, 0, 0, 0]::bigint[], ARRAY['', 'm1', 'm2', '', ''],"
      " ARRAY['smtp', 'ses', 'ses', '', ''])"));
  // A token whose address is suppressed before it is handed out, one that expired unsent.
  tokens.push_back(Token(Request(accounts[5], "password_recovery")));
  tokens.push_back(Token(Request(accounts[6], "password_recovery")));
  Exec("INSERT INTO mailroom.suppressions (address, reason) VALUES ('ev5@example.test', "
       "'manual')");
  Exec(absl::StrCat("UPDATE mailroom.tokens SET expires_at = 1 WHERE id = ", tokens[6]));
  EXPECT_EQ(Dequeue(10).size(), 0u);
  auto feedback = [&](const std::string& key, const std::string& event, const std::string& mids,
                      int64_t job, const std::string& to, const std::string& type,
                      const std::string& detail) {
    return Text(absl::StrCat("SELECT mailroom.mailroom_record_feedback('", key, "', 'ses', '",
                             event, "', ", mids, ", '", job > 0 ? "mailroom" : "", "', ", job,
                             ", ARRAY['", to, "'], '", type, "', '", detail, "', 3)"));
  };
  EXPECT_EQ(feedback("k1", "Delivery", "ARRAY[]::text[]", tokens[0], "ev0@example.test", "", ""),
            "recorded");
  EXPECT_EQ(feedback("k2", "Delivery", "ARRAY[]::text[]", tokens[0], "ev0@example.test", "", ""),
            "recorded");
  EXPECT_EQ(feedback("k3", "Bounce", "ARRAY['m1']", 0, "ev1@example.test", "Permanent", "General"),
            "recorded");
  EXPECT_EQ(feedback("k4", "Bounce", "ARRAY['m1']", 0, "ev1@example.test", "Permanent", "General"),
            "recorded");
  EXPECT_EQ(feedback("k5", "Complaint", "ARRAY['m2']", 0, "ev2@example.test", "", "abuse"),
            "recorded");
  EXPECT_EQ(feedback("k6", "Complaint", "ARRAY['m2']", 0, "ev2@example.test", "", "abuse"),
            "recorded");
  // Unmatched: no event.
  EXPECT_EQ(feedback("k7", "Delivery", "ARRAY['nope']", 0, "ev7@example.test", "", ""),
            "unmatched:no_delivery");
  EXPECT_EQ(PublishAll(*conn_), 10);

  std::vector<std::string> got;
  int64_t last = 0;
  for (const Event& e : ReadEvents(*app_, 0, 100)) {
    EXPECT_GT(e.event_id, last);
    last = e.event_id;
    EXPECT_EQ(e.action, "password_recovery");
    const auto at = std::find(tokens.begin(), tokens.end(), e.token_id);
    ASSERT_NE(at, tokens.end());
    EXPECT_EQ(e.account, accounts[at - tokens.begin()]);
    got.push_back(absl::StrCat(at - tokens.begin(), " ", e.event, " ", e.detail));
  }
  std::sort(got.begin(), got.end());
  EXPECT_EQ(absl::StrJoin(got, ", "),
            "0 delivered NULL, 0 sent smtp, 1 bounced Permanent, 1 sent ses, 2 complained abuse,"
            " 2 sent ses, 3 failed 550 no such user, 4 expired too late,"
            " 5 suppressed address suppressed: manual, 6 expired token expired before delivery");
  EXPECT_TRUE(ReadEvents(*app_, last, 100).empty());
  // Published once: nothing staged is left.
  EXPECT_EQ(PublishAll(*conn_), 0);
}

// The ledger of an account's emails (mailroom.email_history) as the application's role reads
// it: each try that failed for now ('retried', with the sender's reason and its hand-out count,
// through the lease batch's path and then the per-job path), the SENT try with its provider,
// message id and cost, and the provider's bounce, each naming the subscription by the first 12
// characters of its id; events still staged come last with no event id; another account's
// emails are not shown; the feed leaves out the 'retried' events.
TEST_F(InterfaceTest, TheLedgerShowsEveryTryAndEventOfAnAccountsEmails) {
  const int64_t a = Activated("ledger");
  const int64_t b = Activated("other");
  const int64_t t = Token(Request(a, "password_recovery"));
  const int64_t u = Token(Request(b, "password_recovery"));
  const std::string owner = "sub-0123456789abcdef-long";
  auto dequeue = [&] {
    return Int(absl::StrCat("SELECT count(*) FROM mailroom.mailroom_dequeue('mailroom', 10, '",
                            owner, "', 60000)"));
  };
  auto ack = [&](int64_t id, int attempt, const std::string& outcome, const std::string& reason,
                 int64_t cost, const std::string& mid, const std::string& provider) {
    return Int(absl::StrCat("SELECT count(*) FROM mailroom.mailroom_ack('mailroom', '", owner,
                            "', ARRAY[", id, "]::bigint[], ARRAY[", attempt, "], ARRAY['", outcome,
                            "'], ARRAY['", reason, "'], ARRAY[0], ARRAY[", cost,
                            "]::bigint[], ARRAY['", mid, "'], ARRAY['", provider, "'])"));
  };
  ASSERT_EQ(dequeue(), 2);
  EXPECT_EQ(ack(t, 1, "retry", "451 4.3.0 try later", 0, "", ""), 1);  // the batch's path
  EXPECT_EQ(ack(u, 1, "sent", "", 50, "", "smtp"), 1);                 // another account's
  ASSERT_EQ(dequeue(), 1);
  EXPECT_EQ(ack(t, 2, "retry", "resend 429: slow down", 0, "", ""), 1);  // the per-job path
  ASSERT_EQ(dequeue(), 1);
  EXPECT_EQ(ack(t, 3, "sent", "", 120, "m-ledger", "resend"), 1);
  EXPECT_EQ(PublishAll(*conn_), 4);
  EXPECT_EQ(Text("SELECT mailroom.mailroom_record_feedback('kl', 'resend', 'Bounce',"
                 " ARRAY['m-ledger'], '', 0, ARRAY['ledger@example.test'], 'Permanent',"
                 " 'General', 3)"),
            "recorded");
  auto history = [&](int64_t account) {
    std::vector<std::string> rows;
    for (const auto& r : App(absl::StrCat(
             "SELECT coalesce(event_id::text, 'staged'), token_id, action, event,"
             " coalesce(handout::text, '-'), coalesce(subscriber, '-'), coalesce(provider, '-'),"
             " coalesce(provider_message_id, '-'), coalesce(cost_micros::text, '-'),"
             " coalesce(detail, '-') FROM mailroom.email_history(",
             account, ")"))) {
      EXPECT_EQ(r[1].as<int64_t>(), account == a ? t : u);
      EXPECT_EQ(r[2].as<std::string>(), "password_recovery");
      std::vector<std::string> f;
      for (int i = 3; i < 10; ++i) f.push_back(r[i].as<std::string>());
      rows.push_back(absl::StrCat(r[0].as<std::string>() == "staged" ? "staged " : "",
                                  absl::StrJoin(f, " | ")));
    }
    return rows;
  };
  EXPECT_THAT(history(a), ::testing::ElementsAre(
                              "retried | 1 | sub-01234567 | - | - | - | 451 4.3.0 try later",
                              "retried | 2 | sub-01234567 | - | - | - | resend 429: slow down",
                              "sent | 3 | sub-01234567 | resend | m-ledger | 120 | resend",
                              "staged bounced | - | - | resend | - | - | Permanent"));
  EXPECT_THAT(history(b), ::testing::ElementsAre("sent | 1 | sub-01234567 | smtp | - | 50 | smtp"));
  EXPECT_EQ(PublishAll(*conn_), 1);
  EXPECT_EQ(history(a).back(), "bounced | - | - | resend | - | - | Permanent");
  // Published events come in event id order; the newest p_limit of them.
  EXPECT_EQ(App(absl::StrCat("SELECT event FROM mailroom.email_history(", a, ", 2)")).size(), 2u);
  EXPECT_EQ(Text(absl::StrCat("SELECT string_agg(event, ',') FROM mailroom.email_history(", a,
                              ", 2)")),
            "sent,bounced");
  // The feed is the application's seven events: no 'retried'.
  std::vector<std::string> feed;
  for (const Event& e : ReadEvents(*app_, 0, 100)) feed.push_back(e.event);
  EXPECT_THAT(feed, ::testing::UnorderedElementsAre("sent", "sent", "bounced"));
  // A DEFER (held back, nothing tried) and an outcome for a lease no longer held stage nothing.
  const int64_t c = Activated("held");
  const int64_t v = Token(Request(c, "password_recovery"));
  ASSERT_EQ(dequeue(), 1);
  EXPECT_EQ(ack(v, 1, "defer", "budget", 0, "", ""), 1);
  EXPECT_EQ(ack(v, 1, "retry", "too late", 0, "", ""), 0);  // fenced: the lease ended
  EXPECT_EQ(Int(absl::StrCat("SELECT count(*) FROM mailroom.email_events_staged WHERE token_id = ",
                             v)),
            0);
  EXPECT_TRUE(App(absl::StrCat("SELECT 1 FROM mailroom.email_history(", c, ")")).empty());
}

// The plain SENT outcomes of one acknowledgement (no provider message id, no row of their own)
// stage one packed row of email_events_staged_sent per provider and cost, not a row per email:
// the publish unpacks it into one 'sent' event per email, in (at, token id) order with the
// events staged row by row, and the ledger (email_history, mailroom_email_ledger) shows each
// email exactly as it shows an event staged the per-row way (as 0049's mailroom_ack_batched
// wrote it), before the publish and after.
TEST_F(InterfaceTest, ThePlainSentsOfOneAckAreStagedAsOnePackedRow) {
  const std::string owner = "sub-0123456789abcdef-long";
  std::vector<int64_t> accounts, tokens;
  for (int i = 0; i < 7; ++i) {
    accounts.push_back(Activated(absl::StrCat("packed", i)));
    tokens.push_back(Token(Request(accounts[i], "password_recovery")));
  }
  ASSERT_EQ(Int(absl::StrCat("SELECT count(*) FROM mailroom.mailroom_dequeue('mailroom', 10, '",
                             owner, "', 60000)")),
            7);
  // Tokens 0 to 4 in one call, given in reverse; token 5 with another cost.
  std::vector<std::string> ids;
  for (int i = 5; i >= 0; --i) ids.push_back(absl::StrCat(tokens[i]));
  EXPECT_EQ(
      Int(absl::StrCat("SELECT count(*) FROM mailroom.mailroom_ack('mailroom', '", owner,
                       "', ARRAY[", absl::StrJoin(ids, ", "),
                       "]::bigint[], array_fill(1, ARRAY[6]),"
                       " array_fill('sent'::text, ARRAY[6]), array_fill(''::text, ARRAY[6]),"
                       " array_fill(0, ARRAY[6]), ARRAY[9, 70, 70, 70, 70, 70]::bigint[],"
                       " array_fill(''::text, ARRAY[6]), array_fill('smtp'::text, ARRAY[6]))")),
      6);
  EXPECT_EQ(Int("SELECT count(*) FROM mailroom.email_events_staged"), 0);
  EXPECT_EQ(Text("SELECT string_agg(concat_ws(' ', handout, subscriber, provider, cost_micros,"
                 " cardinality(token_ids), emails), ', ' ORDER BY cost_micros)"
                 " FROM mailroom.email_events_staged_sent"),
            "1 sub-01234567 smtp 9 1 1, 1 sub-01234567 smtp 70 5 5");
  EXPECT_EQ(Text("SELECT array_to_string(token_ids, ' ') FROM mailroom.email_events_staged_sent"
                 " WHERE cost_micros = 70"),
            absl::StrCat(tokens[0], " ", tokens[1], " ", tokens[2], " ", tokens[3], " ",
                         tokens[4]));
  // Token 6's event as the per-row staging wrote it, in a later transaction.
  const int64_t group = Int("SELECT id FROM mailroom.consumer_groups WHERE name = 'mailroom'");
  Exec(absl::StrCat("INSERT INTO mailroom.email_events_staged (token_id, event, detail, group_id,"
                    " handout, subscriber, provider, cost_micros) VALUES (",
                    tokens[6], ", 'sent', 'smtp', ", group, ", 1, left('", owner,
                    "', 12), 'smtp', 70)"));
  auto history = [&](int64_t account) {
    std::vector<std::string> rows;
    for (const auto& r : App(absl::StrCat(
             "SELECT coalesce(event_id::text, 'staged'), concat_ws(' | ', event, handout,"
             " subscriber, provider, coalesce(provider_message_id, '-'), cost_micros, detail)"
             " FROM mailroom.email_history(",
             account, ")"))) {
      rows.push_back(absl::StrCat(r[0].as<std::string>() == "staged" ? "staged " : "",
                                  r[1].as<std::string>()));
    }
    return rows;
  };
  auto ledger = [&](int64_t token) {
    std::vector<std::string> rows;
    pqxx::nontransaction tx(*conn_);
    for (const auto& r : tx.exec(absl::StrCat(
             "SELECT coalesce(event_id::text, 'staged'), concat_ws(' | ', token_id = ", token,
             ", event, at_ms > 0, handout, subscriber, provider,"
             " coalesce(provider_message_id, '-'), cost_micros, detail)"
             " FROM mailroom.mailroom_email_ledger(",
             group, ", ARRAY[", token, "]::bigint[])"))) {
      rows.push_back(absl::StrCat(r[0].as<std::string>() == "staged" ? "staged " : "",
                                  r[1].as<std::string>()));
    }
    return rows;
  };
  for (int i = 0; i < 5; ++i) {
    EXPECT_THAT(history(accounts[i]),
                ::testing::ElementsAre("staged sent | 1 | sub-01234567 | smtp | - | 70 | smtp"));
    EXPECT_EQ(history(accounts[i]), history(accounts[6]));
    EXPECT_THAT(ledger(tokens[i]),
                ::testing::ElementsAre(
                    "staged t | sent | t | 1 | sub-01234567 | smtp | - | 70 | smtp"));
    EXPECT_EQ(ledger(tokens[i]), ledger(tokens[6]));
  }
  EXPECT_THAT(history(accounts[5]),
              ::testing::ElementsAre("staged sent | 1 | sub-01234567 | smtp | - | 9 | smtp"));

  EXPECT_EQ(PublishAll(*conn_), 7);
  EXPECT_EQ(Int("SELECT count(*) FROM mailroom.email_events_staged_sent"), 0);
  const std::vector<Event> feed = ReadEvents(*app_, 0, 100);
  ASSERT_EQ(feed.size(), 7u);
  std::vector<int64_t> order;
  int64_t last = 0;
  for (const Event& e : feed) {
    EXPECT_GT(e.event_id, last);
    last = e.event_id;
    EXPECT_EQ(e.event, "sent");
    EXPECT_EQ(e.detail, "smtp");
    EXPECT_EQ(e.action, "password_recovery");
    const auto at = std::find(tokens.begin(), tokens.end(), e.token_id);
    ASSERT_NE(at, tokens.end());
    EXPECT_EQ(e.account, accounts[at - tokens.begin()]);
    order.push_back(e.token_id);
  }
  // Staged in one transaction (one `at`): in token id order; token 6's, staged later, last.
  EXPECT_THAT(order, ::testing::ElementsAreArray(tokens));
  for (int i = 0; i < 5; ++i) {
    EXPECT_THAT(history(accounts[i]),
                ::testing::ElementsAre("sent | 1 | sub-01234567 | smtp | - | 70 | smtp"));
    EXPECT_EQ(history(accounts[i]), history(accounts[6]));
    EXPECT_THAT(ledger(tokens[i]),
                ::testing::ElementsAre("t | sent | t | 1 | sub-01234567 | smtp | - | 70 | smtp"));
    EXPECT_EQ(ledger(tokens[i]), ledger(tokens[6]));
  }
}

// A backlog of events staged row by row as large as a publish's batch does not hold the plain
// SENTs back: each publish also takes the first packed row (whole), and says to go on.
TEST_F(InterfaceTest, APublishTakesThePackedSentsBesideAFullBatchOfOthers) {
  std::vector<int64_t> tokens;
  for (int i = 0; i < 5; ++i) {
    tokens.push_back(Token(Request(Activated(absl::StrCat("backlog", i)), "password_recovery")));
  }
  std::vector<testing::Leased> jobs = Dequeue(10);
  ASSERT_EQ(jobs.size(), 5u);
  EXPECT_EQ(AckSent({jobs[0], jobs[1]}, {"", ""}), 2);
  // Three events staged row by row after the packed row, for the other tokens.
  for (int i = 2; i < 5; ++i) {
    Exec(absl::StrCat("INSERT INTO mailroom.email_events_staged (token_id, event) VALUES (",
                      jobs[i].id, ", 'failed')"));
  }
  pqxx::row first = pqxx::nontransaction(*conn_).exec1(
      "SELECT * FROM mailroom.mailroom_publish_events(2)");
  EXPECT_EQ(first[0].as<int64_t>(), 4);  // 2 staged row by row and the packed row's 2
  EXPECT_TRUE(first[2].as<bool>());
  EXPECT_EQ(Int("SELECT count(*) FROM mailroom.email_events_staged_sent"), 0);
  EXPECT_EQ(Int("SELECT count(*) FROM mailroom.email_events_staged"), 1);
  std::multiset<std::string> events;
  for (const Event& e : ReadEvents(*app_, 0, 100)) events.insert(e.event);
  EXPECT_EQ(events.count("sent"), 2u);
  EXPECT_EQ(events.count("failed"), 2u);
  EXPECT_EQ(PublishAll(*conn_), 1);
  EXPECT_EQ(ReadEvents(*app_, 0, 100).size(), 5u);
}

// Back before the packed staging (0050): the packed plain SENTs become one staged row each, as
// the per-row staging wrote them, and the feed gets each of them once; up again, a plain SENT
// is staged packed.
TEST_F(InterfaceTest, RevertingThePackedStagingKeepsEveryStagedSent) {
  std::vector<int64_t> tokens;
  for (int i = 0; i < 4; ++i) {
    tokens.push_back(Token(Request(Activated(absl::StrCat("unpacked", i)), "password_recovery")));
  }
  std::vector<testing::Leased> jobs = Dequeue(10);
  ASSERT_EQ(jobs.size(), 4u);
  EXPECT_EQ(AckSent({jobs[0], jobs[1], jobs[2]}, {"", "", ""}), 3);
  EXPECT_EQ(Int("SELECT count(*) FROM mailroom.email_events_staged_sent"), 1);
  ASSERT_TRUE(MigrateDown(url_, EmbeddedMigrations(), 49).ok());
  conn_ = std::make_unique<pqxx::connection>(url_);
  EXPECT_EQ(Text("SELECT to_regclass('mailroom.email_events_staged_sent')::text"), "NULL");
  EXPECT_EQ(Text("SELECT string_agg(concat_ws(' ', event, detail, handout, subscriber, provider,"
                 " coalesce(provider_message_id, '-'), cost_micros), ', ')"
                 " FROM mailroom.email_events_staged"),
            "sent 1 s - 0, sent 1 s - 0, sent 1 s - 0");
  // The per-row staging again, until the next migrate up.
  EXPECT_EQ(AckSent({jobs[3]}, {""}), 1);
  EXPECT_EQ(Int("SELECT count(*) FROM mailroom.email_events_staged"), 4);
  EXPECT_EQ(PublishAll(*conn_), 4);
  std::set<int64_t> published;
  for (const Event& e : ReadEvents(*app_, 0, 100)) {
    EXPECT_EQ(e.event, "sent");
    published.insert(e.token_id);
  }
  EXPECT_EQ(published, std::set<int64_t>(tokens.begin(), tokens.end()));
  ASSERT_TRUE(MigrateUp(url_, EmbeddedMigrations()).ok());
  conn_ = std::make_unique<pqxx::connection>(url_);
  std::vector<std::string> again;
  for (int i = 0; i < 3; ++i) {
    again.push_back(
        absl::StrCat(Token(Request(Activated(absl::StrCat("repacked", i)), "password_recovery"))));
  }
  jobs = Dequeue(10);
  ASSERT_EQ(jobs.size(), 3u);
  EXPECT_EQ(AckSent(jobs, {"", "", ""}), 3);
  EXPECT_EQ(Text("SELECT array_to_string(token_ids, ' ') FROM mailroom.email_events_staged_sent"),
            absl::StrJoin(again, " "));
  // A packed row is published whole: a publish of at most 2 numbers its three events.
  pqxx::row first = pqxx::nontransaction(*conn_).exec1(
      "SELECT * FROM mailroom.mailroom_publish_events(2)");
  EXPECT_EQ(first[0].as<int64_t>(), 3);
  EXPECT_TRUE(first[2].as<bool>());
  EXPECT_EQ(PublishAll(*conn_), 0);
  EXPECT_EQ(ReadEvents(*app_, 0, 100).size(), 7u);
}

// The application's listener away for 10,000 events, published in several rounds while it is
// away: back from its cursor, it reads every one exactly once, in order, in pages.
TEST_F(InterfaceTest, TheFeedKeepsEveryEventForAReaderThatWasAway) {
  const int64_t a = Activated("away");
  const int64_t t = Token(Request(a, "password_recovery"));
  auto stage = [&](int from, int to) {
    Exec(absl::StrCat("INSERT INTO mailroom.email_events_staged (token_id, event, detail)"
                      " SELECT ",
                      t, ", 'delivered', i::text FROM generate_series(", from, ", ", to, ") i"));
  };
  stage(0, 9);
  EXPECT_EQ(PublishAll(*conn_), 10);
  std::vector<Event> first = ReadEvents(*app_, 0, 1000);
  ASSERT_EQ(first.size(), 10u);
  const int64_t cursor = first.back().event_id;
  for (int round = 0; round < 10; ++round) {
    stage(10 + round * 1000, 9 + (round + 1) * 1000);
    PublishAll(*conn_);
  }
  std::set<std::string> seen;
  int64_t at = cursor;
  int pages = 0;
  for (;;) {
    std::vector<Event> page = ReadEvents(*app_, at, 333);
    if (page.empty()) break;
    ++pages;
    for (const Event& e : page) {
      EXPECT_GT(e.event_id, at);
      at = e.event_id;
      EXPECT_TRUE(seen.insert(e.detail).second) << e.detail;
    }
  }
  EXPECT_EQ(seen.size(), 10000u);
  EXPECT_EQ(pages, 31);
  EXPECT_EQ(*seen.begin(), "10");
  EXPECT_EQ(seen.count("10009"), 1u);
}

// The application's role LISTENs to mailroom_email_events and is told the last event id of
// each publish that published something.
TEST_F(InterfaceTest, APublishNotifiesTheApplicationsListener) {
  class Listener : public pqxx::notification_receiver {
   public:
    explicit Listener(pqxx::connection_base& c)
        : pqxx::notification_receiver(c, "mailroom_email_events") {}
    void operator()(const std::string& payload, int) override { payloads.push_back(payload); }
    std::vector<std::string> payloads;
  };
  pqxx::connection listening(testing::UrlAs(url_, "app"));
  Listener listener(listening);
  const int64_t a = Activated("listener");
  const int64_t t = Token(Request(a, "password_recovery"));
  EXPECT_EQ(PublishAll(*conn_), 0);  // nothing staged: no notification
  Exec(absl::StrCat("INSERT INTO mailroom.email_events_staged (token_id, event) VALUES (", t,
                    ", 'sent'), (", t, ", 'delivered')"));
  EXPECT_EQ(PublishAll(*conn_), 2);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (listener.payloads.empty() && absl::Now() < deadline) listening.await_notification(1, 0);
  ASSERT_EQ(listener.payloads.size(), 1u);
  EXPECT_EQ(listener.payloads[0], absl::StrCat(ReadEvents(*app_, 0, 10).back().event_id));
}

// Ids from a sequence are taken at insert and committed in any order: a writer that staged an
// event first and commits last must still reach a reader whose cursor passed every event
// published meanwhile. Deterministically (two writers and a publish between their commits),
// then with writers committing at random while a publisher and a reader run: every event once,
// in order.
TEST_F(InterfaceTest, EventsCommittedOutOfOrderAreEachReadOnceInOrder) {
  const int64_t a = Activated("order");
  const int64_t t = Token(Request(a, "password_recovery"));
  const std::string stage = absl::StrCat(
      "INSERT INTO mailroom.email_events_staged (token_id, event, detail) VALUES (", t,
      ", 'sent', ");
  {
    pqxx::connection c1(url_), c2(url_), publisher(url_);
    pqxx::work w1(c1);
    w1.exec(stage + "'first')");
    pqxx::work w2(c2);
    w2.exec(stage + "'second')");
    w2.commit();
    // A publish inside an open transaction holds the turn: another publishes nothing until it
    // ends, and its events are invisible until it commits.
    pqxx::work p1(publisher);
    EXPECT_EQ(
        p1.exec1("SELECT published FROM mailroom.mailroom_publish_events(100)")[0].as<int64_t>(),
        1);
    EXPECT_EQ(PublishAll(*conn_), 0);
    EXPECT_TRUE(ReadEvents(*app_, 0, 10).empty());
    p1.commit();
    std::vector<Event> read = ReadEvents(*app_, 0, 10);
    ASSERT_EQ(read.size(), 1u);
    EXPECT_EQ(read[0].detail, "second");
    w1.commit();
    EXPECT_EQ(PublishAll(*conn_), 1);
    std::vector<Event> later = ReadEvents(*app_, read[0].event_id, 10);
    ASSERT_EQ(later.size(), 1u);
    EXPECT_EQ(later[0].detail, "first");
  }

  // The reader starts after the two events above, read before any writer starts: read later,
  // a first page could already hold events of the writers, which the cursor would pass unread.
  const std::vector<Event> before = ReadEvents(*app_, 0, 10);
  ASSERT_EQ(before.size(), 2u);
  int64_t cursor = before.back().event_id;
  constexpr int kWriters = 4, kPerWriter = 300;
  std::atomic<int> writing{kWriters};
  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      pqxx::connection c(url_);
      std::mt19937 random(w);
      for (int i = 0; i < kPerWriter; i += 3) {
        pqxx::work tx(c);
        for (int j = i; j < i + 3; ++j) tx.exec(absl::StrCat(stage, "'", w, "/", j, "')"));
        // Held open a little while others commit.
        std::this_thread::sleep_for(std::chrono::microseconds(random() % 3000));
        tx.commit();
      }
      --writing;
    });
  }
  threads.emplace_back([&] {
    pqxx::connection c(url_);
    while (writing > 0) {
      PublishAll(c);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    PublishAll(c);
  });
  pqxx::connection reader(testing::UrlAs(url_, "app"));
  std::set<std::string> seen;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (seen.size() < kWriters * kPerWriter && absl::Now() < deadline) {
    for (const Event& e : ReadEvents(reader, cursor, 50)) {
      EXPECT_GT(e.event_id, cursor);
      cursor = e.event_id;
      EXPECT_TRUE(seen.insert(e.detail).second) << e.detail;
    }
  }
  for (auto& th : threads) th.join();
  for (const Event& e : ReadEvents(reader, cursor, 10000)) {
    EXPECT_TRUE(seen.insert(e.detail).second) << e.detail;
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(kWriters * kPerWriter));
  if (seen.size() != static_cast<size_t>(kWriters * kPerWriter)) {
    // What the feed and the staging table hold, to tell an event never published from one
    // published behind the reader's cursor.
    std::string missing;
    for (int w = 0; w < kWriters; ++w) {
      for (int j = 0; j < kPerWriter; ++j) {
        const std::string d = absl::StrCat(w, "/", j);
        if (seen.count(d) == 0) absl::StrAppend(&missing, " ", d);
      }
    }
    ADD_FAILURE() << "missing" << missing << "; cursor " << cursor << "; staged "
                  << Text("SELECT count(*)::text FROM mailroom.email_events_staged")
                  << "; feed (count min max) "
                  << Text("SELECT concat_ws(' ', count(*), min(event_id), max(event_id))"
                          " FROM mailroom.email_events")
                  << "; missing in the feed at ids "
                  << Text("SELECT coalesce(string_agg(event_id::text, ' '), 'none')"
                          " FROM mailroom.email_events WHERE detail = ANY (string_to_array('" +
                          missing + "', ' '))");
  }
}

// The feed keeps events mailroom_settings.event_retention_days; older ones are pruned.
TEST_F(InterfaceTest, TheFeedIsPrunedAfterItsRetention) {
  const int64_t a = Activated("retained");
  const int64_t t = Token(Request(a, "password_recovery"));
  Exec(absl::StrCat("INSERT INTO mailroom.email_events_staged (token_id, event, at) VALUES (", t,
                    ", 'sent', now() - interval '8 days'), (", t,
                    ", 'delivered', now() - interval '6 days')"));
  EXPECT_EQ(PublishAll(*conn_), 2);
  EXPECT_EQ(Text("SELECT pruned || ' ' || more FROM mailroom.mailroom_prune_email_events(100)"),
            "1 false");
  std::vector<Event> left = ReadEvents(*app_, 0, 10);
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].event, "delivered");
  EXPECT_THROW(Exec("UPDATE mailroom.mailroom_settings SET event_retention_days = 0"),
               pqxx::check_violation);
}

// A role that may only connect cannot read the feed (nor take the publishers' turn).
TEST_F(InterfaceTest, AStrangerCannotReadTheFeedNorTheLedger) {
  Exec("DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'stranger') THEN"
       " CREATE ROLE stranger LOGIN; END IF; END $$;"
       "GRANT CONNECT ON DATABASE " +
       Text("SELECT current_database()") + " TO stranger");
  pqxx::connection c(testing::UrlAs(url_, "stranger"));
  EXPECT_THROW(pqxx::nontransaction(c).exec("SELECT * FROM mailroom.email_events(0, 10)"),
               pqxx::insufficient_privilege);
  pqxx::connection d(testing::UrlAs(url_, "stranger"));
  EXPECT_THROW(pqxx::nontransaction(d).exec(
                   "SELECT 1 FROM mailroom.email_event_publisher FOR UPDATE"),
               pqxx::insufficient_privilege);
  // Nor the ledger, nor the operators' audit, even with USAGE on the schema.
  Exec("GRANT USAGE ON SCHEMA mailroom TO stranger");
  pqxx::connection e(testing::UrlAs(url_, "stranger"));
  EXPECT_THROW(pqxx::nontransaction(e).exec("SELECT * FROM mailroom.email_history(1)"),
               pqxx::insufficient_privilege);
  pqxx::connection f(testing::UrlAs(url_, "stranger"));
  EXPECT_THROW(pqxx::nontransaction(f).exec("SELECT * FROM mailroom.operator_audit"),
               pqxx::insufficient_privilege);
  pqxx::connection g(testing::UrlAs(url_, "stranger"));
  EXPECT_THROW(pqxx::nontransaction(g).exec("SELECT * FROM mailroom.email_events(0, 10)"),
               pqxx::insufficient_privilege);
  Exec("REVOKE USAGE ON SCHEMA mailroom FROM stranger");
  // The application itself reads the feed but cannot take the turn either, nor read or write
  // the audit.
  EXPECT_THROW(App("SELECT 1 FROM mailroom.email_event_publisher FOR UPDATE"),
               pqxx::insufficient_privilege);
  EXPECT_THROW(App("SELECT * FROM mailroom.operator_audit"), pqxx::insufficient_privilege);
  EXPECT_THROW(App("SELECT mailroom.mailroom_audit('app', 'x', '', '')"),
               pqxx::insufficient_privilege);
}

// The application's EXECUTE on mailroom.request follows its signature both ways: back before
// the idempotency key (0044) the three-argument request is callable, and up again the new one.
TEST_F(InterfaceTest, TheApplicationKeepsRequestAcrossTheKeysMigration) {
  const int64_t a = Activated("migrating");
  ASSERT_TRUE(MigrateDown(url_, EmbeddedMigrations(), 44).ok());
  EXPECT_EQ(Text("SELECT string_agg(oid::regprocedure::text, ' ') FROM pg_proc"
                 " WHERE proname = 'request' AND pronamespace = 'mailroom'::regnamespace"),
            "request(bigint,text,text)");
  EXPECT_EQ(Request(a, "password_changed").decision, "queued");
  ASSERT_TRUE(MigrateUp(url_, EmbeddedMigrations()).ok());
  EXPECT_EQ(Text("SELECT string_agg(oid::regprocedure::text, ' ') FROM pg_proc"
                 " WHERE proname = 'request' AND pronamespace = 'mailroom'::regnamespace"),
            "request(bigint,text,text,text)");
  EXPECT_EQ(Request(a, "password_changed").decision, "queued");
  EXPECT_EQ(App(absl::StrCat("SELECT decision FROM mailroom.request(", a,
                             ", 'password_changed', NULL, 'up')"))[0][0]
                .as<std::string>(),
            "queued");
}

// --- Idempotency keys ----------------------------------------------------------------------

// The same key for the same account and action returns the first request's token and sends
// nothing more; with another action it is refused; another account's key is its own; the
// previous signature still works.
TEST_F(InterfaceTest, AnIdempotencyKeyReturnsTheSameToken) {
  const int64_t a = Activated("keyed");
  const int64_t b = Activated("keyed2");
  auto keyed = [&](int64_t account, const std::string& action, const std::string& key) {
    pqxx::row r = App(absl::StrCat("SELECT * FROM mailroom.request(", account, ", ",
                                   app_->quote(action), ", NULL, ", app_->quote(key), ")"))[0];
    return Decision{Field(r[0]), Field(r[1]), Field(r[2]), Field(r[3])};
  };
  const int64_t t = Token(keyed(a, "password_recovery", "order-1"));
  EXPECT_EQ(Token(keyed(a, "password_recovery", "order-1")), t);
  EXPECT_EQ(Int(absl::StrCat("SELECT count(*) FROM mailroom.tokens WHERE account = ", a)), 1);
  const Decision other = keyed(a, "login_code", "order-1");
  EXPECT_EQ(other.decision, "refused");
  EXPECT_EQ(other.reason, "idempotency key already used for password_recovery");
  EXPECT_NE(Token(keyed(b, "password_recovery", "order-1")), t);
  EXPECT_NE(Token(keyed(a, "password_recovery", "order-2")), t);
  // Named, and the previous calls without a key.
  EXPECT_EQ(App(absl::StrCat("SELECT token_id FROM mailroom.request(", a,
                             ", 'password_recovery', p_idempotency_key => 'order-1')"))[0][0]
                .as<int64_t>(),
            t);
  EXPECT_EQ(Request(a, "password_changed").decision, "queued");
  EXPECT_EQ(App(absl::StrCat("SELECT decision FROM mailroom.request(", a,
                             ", 'password_changed')"))[0][0]
                .as<std::string>(),
            "queued");
  EXPECT_EQ(keyed(a, "password_changed", "").reason, "idempotency key: 1 to 200 characters");
  EXPECT_EQ(keyed(a, "password_changed", std::string(201, 'k')).decision, "refused");
  // Consumed since: still the same token, still nothing new.
  Consume(Link(t).first, Link(t).second);
  EXPECT_EQ(Token(keyed(a, "password_recovery", "order-1")), t);
}

// A key names a token for its lifetime only, and never a rate limited one: past the token's
// expiry, or after a rate limited request, the same key is decided afresh.
TEST_F(InterfaceTest, AnIdempotencyKeyLastsTheTokensLifetime) {
  const int64_t a = Activated("keylife");
  auto keyed = [&](const std::string& action, const std::string& key) {
    pqxx::row r = App(absl::StrCat("SELECT * FROM mailroom.request(", a, ", ", app_->quote(action),
                                   ", NULL, ", app_->quote(key), ")"))[0];
    return Decision{Field(r[0]), Field(r[1]), Field(r[2]), Field(r[3])};
  };
  const int64_t t = Token(keyed("password_recovery", "k"));
  Exec(absl::StrCat("UPDATE mailroom.tokens SET expires_at = extract(epoch FROM now())::bigint"
                    " - 1 WHERE id = ",
                    t));
  const int64_t again = Token(keyed("password_recovery", "k"));
  EXPECT_NE(again, t);
  // password_changed: 3 a day. The fourth is rate limited; its key names no token.
  for (int i = 0; i < 3; ++i) Token(keyed("password_changed", absl::StrCat("n", i)));
  const Decision limited = keyed("password_changed", "n3");
  EXPECT_EQ(limited.decision, "rate_limited");
  const Decision retried = keyed("password_changed", "n3");
  EXPECT_EQ(retried.decision, "rate_limited");
  EXPECT_NE(retried.token_id, limited.token_id);
}

// Two requests with one key at once: one token.
TEST_F(InterfaceTest, TwoRequestsWithOneKeyAtOnceMakeOneToken) {
  const int64_t a = Activated("keyrace");
  pqxx::connection c1(testing::UrlAs(url_, "app")), c2(testing::UrlAs(url_, "app"));
  const std::string sql = absl::StrCat("SELECT token_id FROM mailroom.request(", a,
                                       ", 'password_recovery', NULL, 'same')");
  pqxx::work w1(c1);
  const int64_t first = w1.exec1(sql)[0].as<int64_t>();
  int64_t second = 0;
  std::thread other([&] {
    pqxx::work w2(c2);
    second = w2.exec1(sql)[0].as<int64_t>();  // waits for the first to commit
    w2.commit();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  w1.commit();
  other.join();
  EXPECT_EQ(second, first);
  EXPECT_EQ(Int(absl::StrCat("SELECT count(*) FROM mailroom.tokens WHERE account = ", a)), 1);
}

}  // namespace
}  // namespace mailroom
