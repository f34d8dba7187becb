// The operator's console in a real browser, behind the nginx it ships with: a real collector
// (its console on, its /feedback/sandbox path on), a real sender delivering through the sandbox
// transport, nginx with deploy/nginx/console.conf as shipped but for its port and certificate,
// and Debian's headless Chromium driven by integration_tests/console_browser.mjs
// (puppeteer-core). The sandbox bounces one of five signups; in the browser a stranger gets
// nothing, the operator finds the address, sees the bounce on the email's timeline, removes the
// suppression with a reason, and reads the group's charts, whose figures must be the
// database's; a group's operator sees only its group. Screenshots go to the test's outputs
// (TEST_UNDECLARED_OUTPUTS_DIR: bazel-testlogs/integration_tests/console_test/test.outputs).
#include <fstream>
#include <map>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/mailroom/v1/mailroom.grpc.pb.h"
#include "testing/collector_client.h"
#include "testing/pg_server.h"
#include "testing/process.h"
#include "testing/stack.h"

namespace mailroom {
namespace {

constexpr char kSandboxSecret[] = "whsec_c2FuZGJveHNhbmRib3hzYW5kYm94c2FuZGJveA==";
constexpr char kOperator[] = "console-operator-token-0123456789";
constexpr char kGroupOperator[] = "console-group-operator-token-0123456789";
constexpr char kBounce[] = "bounce@sandbox.mailroom.test";

class ConsoleTest : public testing::StackTest {
 protected:
  // nginx in front of the console at `console_port`; returns its TLS port.
  int StartProxy(int console_port) {
    const std::string d = dir_ + "/nginx";
    EXPECT_EQ(std::system(absl::StrCat("mkdir -p ", d,
                                       " && openssl req -x509 -newkey ec -pkeyopt "
                                       "ec_paramgen_curve:P-256 -nodes -subj /CN=localhost "
                                       "-days 1 -addext subjectAltName=IP:127.0.0.1 -keyout ",
                                       d, "/tls.key -out ", d, "/tls.crt 2>/dev/null")
                              .c_str()),
              0);
    const int port = testing::FreePort();
    const std::string conf = testing::Slurp(testing::Runfile("mailroom/deploy/nginx/console.conf"));
    EXPECT_THAT(conf, ::testing::HasSubstr("listen 8444 ssl;"));
    std::ofstream(d + "/console.conf") << absl::StrReplaceAll(
        conf, {{"listen 8444 ssl;", absl::StrCat("listen 127.0.0.1:", port, " ssl;")},
               {"/etc/mailroom/console-tls/", d + "/"},
               {"/etc/nginx/mailroom/console-proxy.conf", d + "/console-proxy.conf"}});
    std::ofstream(d + "/console-proxy.conf")
        << testing::Slurp(testing::Runfile("mailroom/deploy/nginx/console-proxy.conf"));
    std::ofstream(d + "/nginx.conf")
        << absl::StrCat("pid ", d, "/nginx.pid;\nerror_log ", d, "/nginx.log warn;\nuser root;\n",
                        "events { worker_connections 256; }\nhttp {\n  access_log off;\n",
                        "  client_body_temp_path ", d, "/body;\n  proxy_temp_path ", d, "/proxy;\n",
                        "  fastcgi_temp_path ", d, "/fastcgi;\n  uwsgi_temp_path ", d, "/uwsgi;\n",
                        "  scgi_temp_path ", d,
                        "/scgi;\n  upstream mailroom_console { server 127.0.0.1:", console_port,
                        "; }\n  include ", d, "/console.conf;\n}\n");
    auto p = testing::Process::Spawn({"/usr/sbin/nginx", "-p", d, "-c", d + "/nginx.conf", "-e",
                                      d + "/nginx.log", "-g", "daemon off;"},
                                     {}, d + "/nginx.out");
    EXPECT_TRUE(p.ok()) << p.status();
    if (p.ok()) proxy_ = *std::move(p);
    return port;
  }

  std::unique_ptr<testing::Process> proxy_;
};

TEST_F(ConsoleTest, AnOperatorFindsTheBounceRemovesTheSuppressionAndReadsTheCharts) {
  const char* modules = std::getenv("MAILROOM_NODE_MODULES");
  ASSERT_NE(modules, nullptr) << "MAILROOM_NODE_MODULES must point at the npm peers";
  const int collector_port = testing::FreePort();
  const int feedback_port = testing::FreePort();
  const int console_port = testing::FreePort();
  Exec("SELECT mailroom_ensure_group('audit', false)");
  auto collector = StartCollector(
      {{"MAILROOM_FEEDBACK_ADDRESS", absl::StrCat("127.0.0.1:", feedback_port)},
       {"MAILROOM_FEEDBACK_SANDBOX_SECRET", kSandboxSecret},
       {"MAILROOM_CONSOLE_ADDRESS", absl::StrCat("127.0.0.1:", console_port)},
       {"MAILROOM_SUBSCRIBER_TOKENS",
        absl::StrCat(testing::kStackBearer, ",", kOperator, "@*:operator,", kGroupOperator,
                     "@audit:operator")}},
      "console-collector", collector_port);
  ASSERT_NE(collector, nullptr);
  // A budget for the group's chart: 1,000 units this month.
  auto stub = v1::Collector::NewStub(grpc::CreateChannel(absl::StrCat("127.0.0.1:", collector_port),
                                                         grpc::InsecureChannelCredentials()));
  {
    v1::SetGroupBudgetRequest set;
    set.set_consumer_group("mailroom");
    set.set_monthly_budget_micros(1000000000);
    v1::GroupBudget budget;
    grpc::ClientContext ctx;
    testing::Authorize(&ctx, kOperator);
    ASSERT_TRUE(stub->SetGroupBudget(&ctx, set, &budget).ok());
  }
  auto sender = StartSender(
      {{"MAILROOM_TRANSPORT", "sandbox"},
       {"MAILROOM_SANDBOX_FEEDBACK_URL",
        absl::StrCat("http://127.0.0.1:", feedback_port, "/feedback/sandbox")},
       {"MAILROOM_SANDBOX_FEEDBACK_SECRET", kSandboxSecret},
       {"MAILROOM_SANDBOX_EVENT_DELAY_MS", "200"}},
      "sender", collector_port);
  ASSERT_NE(sender, nullptr);
  Exec(absl::StrCat("INSERT INTO accounts (email, login) VALUES ('", kBounce,
                    "', 'bounce'),"
                    " ('ann@example.test', 'ann'), ('bob@example.test', 'bob'),"
                    " ('cem@example.test', 'cem'), ('dee@example.test', 'dee')"));
  const absl::Duration deadline = absl::Seconds(30);
  ASSERT_EQ(WaitFor(absl::StrCat("SELECT count(*) FROM suppressions WHERE address = '", kBounce,
                                 "'"),
                    1, deadline),
            1)
      << collector->Log() << sender->Log();
  ASSERT_EQ(WaitFor("SELECT count(*) FROM mailroom.email_events(0, 1000) WHERE event = 'sent'", 5,
                    deadline),
            5);
  ASSERT_EQ(WaitFor("SELECT count(*) FROM mailroom.email_events(0, 1000) WHERE event = 'bounced'",
                    1, deadline),
            1);
  const int proxy_port = StartProxy(console_port);
  ASSERT_NE(proxy_, nullptr);

  const char* outputs = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR");
  const std::string shots = outputs != nullptr ? outputs : dir_;
  auto browser = testing::Process::Spawn(
      {"/usr/bin/node", testing::Runfile("mailroom/integration_tests/console_browser.mjs")},
      {{"CONSOLE", absl::StrCat("https://127.0.0.1:", proxy_port)},
       {"OPERATOR_TOKEN", kOperator},
       {"GROUP_TOKEN", kGroupOperator},
       {"ADDRESS", kBounce},
       {"SHOTS", shots},
       {"PUPPETEER", absl::StrCat(modules, "/puppeteer-core")},
       {"CHROMIUM", "/usr/bin/chromium"}},
      dir_ + "/browser.log");
  ASSERT_TRUE(browser.ok()) << browser.status();
  auto code = (*browser)->Wait(absl::Seconds(120));
  const std::string log = (*browser)->Log();
  std::cout << log;
  ASSERT_TRUE(code.ok()) << code.status() << log;
  ASSERT_EQ(*code, 0) << log << collector->Log();

  // The figures the charts drew are the database's.
  std::map<std::string, std::string> facts;
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    if (!absl::ConsumePrefix(&line, "FACT ")) continue;
    for (absl::string_view kv : absl::StrSplit(line, ' ')) {
      const size_t eq = kv.find('=');
      if (eq != absl::string_view::npos) {
        facts[std::string(kv.substr(0, eq))] = std::string(kv.substr(eq + 1));
      }
    }
  }
  const std::string of_group =
      " FROM reputation_hourly r JOIN consumer_groups g ON g.id = r.group_id"
      " WHERE g.name = 'mailroom' AND r.hour > now() - interval '24 hours'";
  EXPECT_EQ(facts["hourly_sent"], absl::StrCat(Scalar("SELECT coalesce(sum(sent), 0)" + of_group)));
  EXPECT_EQ(facts["hourly_sent"], "5");
  EXPECT_EQ(facts["hourly_bounced"],
            absl::StrCat(Scalar("SELECT coalesce(sum(bounced), 0)" + of_group)));
  EXPECT_EQ(facts["hourly_bounced"], "1");
  EXPECT_EQ(facts["budget"], "1000000000");
  {
    v1::GetGroupBudgetRequest get;
    get.set_consumer_group("mailroom");
    v1::GroupBudget budget;
    grpc::ClientContext ctx;
    testing::Authorize(&ctx, kOperator);
    ASSERT_TRUE(stub->GetGroupBudget(&ctx, get, &budget).ok());
    // What was spent is settled; what is committed moves as the sender gives back what it
    // did not use, but never below what was spent.
    EXPECT_EQ(facts["spent"], absl::StrCat(budget.spent_micros()));
    EXPECT_EQ(budget.sent(), 5u);
    EXPECT_GT(budget.spent_micros(), 0);
    int64_t committed = 0;
    EXPECT_TRUE(absl::SimpleAtoi(facts["committed"], &committed));
    EXPECT_GE(committed, budget.spent_micros());
  }
  int64_t pace = 0;
  EXPECT_TRUE(absl::SimpleAtoi(facts["pace"], &pace));
  EXPECT_GT(pace, 0);
  EXPECT_LT(pace, 1000000000);
  EXPECT_EQ(facts["trouble_rows"], "1");  // the bounce
  EXPECT_EQ(facts["timeline"], "sent,bounced");
  // The removal happened, and both operator actions are in the audit.
  EXPECT_EQ(
      Scalar(absl::StrCat("SELECT count(*) FROM suppressions WHERE address = '", kBounce, "'")), 0);
  EXPECT_EQ(Scalar(absl::StrCat("SELECT count(*) FROM mailroom.operator_audit WHERE method ="
                                " 'RemoveSuppression (console)' AND target = '",
                                kBounce,
                                " reason user fixed the mailbox' AND outcome ="
                                " 'OK: removed hard_bounce'")),
            1);
  // The search, and the address's page again after the removal.
  EXPECT_EQ(Scalar(absl::StrCat("SELECT count(*) FROM mailroom.operator_audit WHERE method ="
                                " 'FindEmails (console)' AND target = '",
                                kBounce, "' AND consumer_group = 'mailroom'")),
            2);
  // A group's operator (token 3) read its own group's failures, and nothing of another group:
  // the refusal came before any read.
  EXPECT_EQ(Scalar("SELECT count(*) FROM mailroom.operator_audit WHERE credential = 'token 3'"
                   " AND method = 'ListFailures (console)' AND consumer_group = 'audit'"),
            1);
  EXPECT_EQ(Scalar("SELECT count(*) FROM mailroom.operator_audit WHERE credential = 'token 3'"
                   " AND (consumer_group <> 'audit' OR method <> 'ListFailures (console)')"),
            0);
  EXPECT_THAT(collector->Log(), ::testing::Not(::testing::HasSubstr(kOperator)));
}

}  // namespace
}  // namespace mailroom
