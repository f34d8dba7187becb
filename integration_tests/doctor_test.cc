// `sender doctor` against real peers: a real collector (and PostgreSQL), aiosmtpd SMTP servers
// (STARTTLS with a certificate trusted, untrusted, expired or for another name, AUTH by password or
// XOAUTH2, no TLS at all), the local token endpoint and the SigV4-checking SES front answering
// GetAccount. Each misconfiguration must give its own problem line (and only that one) and exit
// status 1; healthy configurations exit 0; a configuration that does not load exits 2 as the
// service does; no secret is ever printed.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/pg_server.h"
#include "testing/process.h"
#include "testing/stack.h"

namespace mailroom {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::Process;

constexpr char kSmtpPassword[] = "sm7p-doctor-pa55word";
constexpr char kWrongSmtpPassword[] = "wrong-sm7p-pa55word";
constexpr char kWrongAwsSecret[] = "wrongSecretKeyForTheDoctorTest0123456789";
constexpr char kWrongBearer[] = "wrong-subscriber-token-0123456789";
constexpr char kClientSecret[] = "oauth2-client-s3cret";
constexpr char kWrongClientSecret[] = "wrong-oauth2-client-s3cret";

struct Outcome {
  int code = -1;
  std::string out;  // stdout and stderr
};

std::vector<std::string> Lines(const std::string& out, absl::string_view prefix) {
  std::vector<std::string> lines;
  for (absl::string_view l : absl::StrSplit(out, '\n')) {
    if (absl::StartsWith(l, prefix)) lines.emplace_back(l);
  }
  return lines;
}

// `a` with `b`'s variables set over it.
std::map<std::string, std::string> With(std::map<std::string, std::string> a,
                                        const std::map<std::string, std::string>& b) {
  for (const auto& [k, v] : b) a[k] = v;
  return a;
}

void Write(const std::string& path, const std::string& content) {
  std::ofstream(path + ".tmp") << content;
  fs::rename(path + ".tmp", path);  // a peer reading it sees the old or the new content whole
}

class DoctorTest : public testing::StackTest {
 protected:
  void SetUp() override {
    StackTest::SetUp();
    if (HasFatalFailure()) return;
    // Self-signed certificates for 127.0.0.1 and for another name.
    struct Cert {
      const char *name, *cn, *san;
    };
    for (const Cert& c : {Cert{"ok", "127.0.0.1", "IP:127.0.0.1"},
                          Cert{"other", "mail.example.test", "DNS:mail.example.test"}}) {
      const std::string name = c.name, cn = c.cn, san = c.san;
      const std::string cmd = absl::StrCat(
          "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=", cn,
          " -addext subjectAltName=", san, " -keyout ", dir_, "/", name, ".key -out ", dir_, "/",
          name, ".pem >/dev/null 2>&1");
      ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    }
    // And one for 127.0.0.1 that expired in 2020 (`openssl ca` takes explicit dates).
    const std::string ca = dir_ + "/expired-ca";
    fs::create_directories(ca);
    Write(ca + "/index.txt", "");
    Write(ca + "/serial", "01\n");
    Write(ca + "/ca.cnf", absl::StrCat("[ca]\ndefault_ca = d\n[d]\ndatabase = ", ca,
                                       "/index.txt\nnew_certs_dir = ", ca, "\nserial = ", ca,
                                       "/serial\ndefault_md = sha256\npolicy = p\n"
                                       "copy_extensions = copy\n[p]\ncommonName = supplied\n"));
    const std::string expired = absl::StrCat(
        "openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -addext "
        "subjectAltName=IP:127.0.0.1 -addext basicConstraints=critical,CA:TRUE -keyout ",
        dir_, "/expired.key -out ", ca, "/req.pem >/dev/null 2>&1 && openssl ca -batch -config ",
        ca, "/ca.cnf -selfsign -keyfile ", dir_, "/expired.key -in ", ca,
        "/req.pem -startdate 20200101000000Z -enddate 20200102000000Z -out ", dir_,
        "/expired.pem >/dev/null 2>&1");
    ASSERT_EQ(std::system(expired.c_str()), 0) << expired;
    base_ = {
        {"MAILROOM_COLLECTOR_ADDRESS", absl::StrCat("127.0.0.1:", collector_port_)},
        {"MAILROOM_COLLECTOR_TOKEN", testing::kStackBearer},
        {"MAILROOM_FROM", "Acme <no-reply@acme.net>"},
        {"MAILROOM_LINK_BASE_URL", "https://app.example.net/"},
        {"MAILROOM_TRANSPORT", "file"},
        {"MAILROOM_FILE_DIR", dir_ + "/outbox"},
        {"MAILROOM_METRICS_ADDRESS", "off"},
        {"MAILROOM_HEALTH_ADDRESS", "off"},
    };
  }

  // Starts a peer (python3 script from the runfiles, then `args`) and waits for its "ready".
  void StartPeer(const std::string& script, std::vector<std::string> args,
                 const std::string& name) {
    std::vector<std::string> argv = {
        "/usr/bin/python3",
        testing::Runfile(absl::StrCat("mailroom/sender/transport/testing/", script))};
    argv.insert(argv.end(), args.begin(), args.end());
    auto p = Process::Spawn(argv, {}, absl::StrCat(dir_, "/", name, ".log"));
    ASSERT_TRUE(p.ok()) << p.status();
    ASSERT_TRUE((*p)->WaitForLog("ready", absl::Seconds(20))) << (*p)->Log();
    peers_.push_back(*std::move(p));
  }

  // An SMTP peer on a fresh port: STARTTLS with `cert` ("" for none), then `auth`'s flags
  // (default: PLAIN AUTH as mailer/kSmtpPassword; empty: no AUTH).
  int StartSmtp(const std::string& cert, const std::vector<std::string>& auth = {
                                             "--auth", absl::StrCat("mailer:", kSmtpPassword)}) {
    const int port = testing::FreePort();
    std::vector<std::string> args = {"--port", absl::StrCat(port), "--dir",
                                     absl::StrCat(dir_, "/smtp-", port)};
    if (!cert.empty()) {
      args.insert(args.end(), {"--tls-cert", absl::StrCat(dir_, "/", cert, ".pem"), "--tls-key",
                               absl::StrCat(dir_, "/", cert, ".key"), "--require-tls"});
    }
    args.insert(args.end(), auth.begin(), auth.end());
    StartPeer("smtp_peer.py", args, absl::StrCat("smtp-", port));
    return port;
  }

  std::map<std::string, std::string> Smtp(int port) {
    return {{"MAILROOM_TRANSPORT", "smtp"},
            {"MAILROOM_SMTP_URL", absl::StrCat("smtp://127.0.0.1:", port)},
            {"MAILROOM_SMTP_USERNAME", "mailer"},
            {"MAILROOM_SMTP_PASSWORD", kSmtpPassword},
            {"MAILROOM_SMTP_CA_FILE", dir_ + "/ok.pem"}};
  }

  // The SES front on its own (GetAccount and ListEmailIdentities need no emulator behind it),
  // reading the account's state from `account_file` and its identities from identities_ (at
  // first: acme.net, MAILROOM_FROM's domain, verified); returns its endpoint.
  std::string StartSesFront(const std::string& account_file) {
    identities_ = dir_ + "/identities.json";
    Write(identities_, R"([{"IdentityName": "acme.net", "IdentityType": "DOMAIN",
                           "SendingEnabled": true, "VerificationStatus": "SUCCESS"}])");
    const int port = testing::FreePort();
    StartPeer("ses_front.py",
              {"--port", absl::StrCat(port), "--upstream",
               absl::StrCat("http://127.0.0.1:", testing::FreePort()), "--access-key",
               "AKIDEXAMPLE", "--secret-key", testing::kStackAwsSecret, "--account-file",
               account_file, "--identities-file", identities_},
              "ses-front");
    return absl::StrCat("http://127.0.0.1:", port);
  }

  // Runs `sender doctor` with the base environment and `extra` over it.
  // With `args` after `doctor` (--send-test ADDRESS).
  Outcome Doctor(const std::map<std::string, std::string>& extra,
                 const std::vector<std::string>& args = {}) {
    std::map<std::string, std::string> env = base_;
    for (const auto& [k, v] : extra) env[k] = v;
    std::vector<std::string> argv = {testing::Runfile("mailroom/sender/sender"), "doctor"};
    argv.insert(argv.end(), args.begin(), args.end());
    auto p = Process::Spawn(argv, env, absl::StrCat(dir_, "/doctor-", ++runs_, ".log"));
    EXPECT_TRUE(p.ok());
    if (!p.ok()) return {};
    auto code = (*p)->Wait(absl::Seconds(60));
    EXPECT_TRUE(code.ok()) << "sender doctor did not finish: " << (*p)->Log();
    Outcome o{code.ok() ? *code : -1, (*p)->Log()};
    for (const char* secret :
         {kSmtpPassword, kWrongSmtpPassword, testing::kStackAwsSecret, kWrongAwsSecret,
          testing::kStackBearer, kWrongBearer, kClientSecret, kWrongClientSecret}) {
      EXPECT_THAT(o.out, Not(HasSubstr(secret))) << "a secret was printed";
    }
    EXPECT_THAT(o.out, Not(HasSubstr("terminate called")));
    return o;
  }

  // `sender doctor` finds exactly one problem, `line`.
  void ExpectProblem(const std::map<std::string, std::string>& extra, const std::string& line) {
    SCOPED_TRACE(line);
    Outcome o = Doctor(extra);
    EXPECT_EQ(o.code, 1) << o.out;
    EXPECT_THAT(o.out, HasSubstr(line)) << o.out;
    EXPECT_EQ(Lines(o.out, "FAIL ").size(), 1u) << o.out;
    EXPECT_THAT(o.out, HasSubstr("\n1 problem, ")) << o.out;
  }

  void ExpectHealthy(const std::map<std::string, std::string>& extra, const std::string& line) {
    SCOPED_TRACE(line);
    Outcome o = Doctor(extra);
    EXPECT_EQ(o.code, 0) << o.out;
    EXPECT_THAT(o.out, HasSubstr(line)) << o.out;
    EXPECT_THAT(Lines(o.out, "FAIL "), ::testing::IsEmpty()) << o.out;
    EXPECT_THAT(o.out, HasSubstr("ok   collector: 127.0.0.1:")) << o.out;
    EXPECT_THAT(o.out, HasSubstr("ok   templates: 18 sets of 9 actions render a sample job"))
        << o.out;
  }

  std::map<std::string, std::string> base_;
  std::string identities_;
  int runs_ = 0;
};

TEST_F(DoctorTest, HealthyConfigurationsExitZero) {
  ExpectHealthy({}, "ok   file: messages are written to ");

  const int smtp = StartSmtp("ok");
  ExpectHealthy(Smtp(smtp), absl::StrCat("ok   smtp: 127.0.0.1:", smtp,
                                         ": connected, STARTTLS (certificate verified), "
                                         "authenticated as mailer, NOOP answered"));
  // Nothing was sent.
  EXPECT_THAT(testing::Files(absl::StrCat(dir_, "/smtp-", smtp), ".eml"), ::testing::IsEmpty());

  // A relay without TLS or AUTH, allowed on purpose: it works, with warnings.
  const int relay = StartSmtp("", {});
  Outcome o = Doctor(With(Smtp(relay), {{"MAILROOM_SMTP_ALLOW_PLAIN", "true"}}));
  EXPECT_EQ(o.code, 0) << o.out;
  EXPECT_THAT(o.out, HasSubstr(absl::StrCat("warn smtp: 127.0.0.1:", relay, ": no TLS")));
  EXPECT_THAT(o.out, HasSubstr(absl::StrCat("warn smtp: 127.0.0.1:", relay,
                                            " offers no AUTH: "
                                            "MAILROOM_SMTP_USERNAME's credentials are not used")));
  EXPECT_THAT(o.out, HasSubstr(absl::StrCat("ok   smtp: 127.0.0.1:", relay,
                                            ": connected, NOOP answered")));
  EXPECT_THAT(o.out, HasSubstr("\n0 problems, 2 warnings")) << o.out;

  // XOAUTH2 with a token from the client-credentials endpoint.
  const int token_port = testing::FreePort();
  const std::string state = dir_ + "/oauth2-state.json";
  StartPeer("oauth2_token_endpoint.py",
            {"--port", absl::StrCat(token_port), "--state", state, "--client-id", "doctor-app",
             "--client-secret", kClientSecret},
            "oauth2");
  const int xoauth2 = StartSmtp("ok", {"--xoauth2-state", state, "--xoauth2-user",
                                       "mailbox@example.net"});
  const std::string token_url = absl::StrCat("http://127.0.0.1:", token_port, "/token");
  std::map<std::string, std::string> oauth2 = {
      {"MAILROOM_TRANSPORT", "smtp"},
      {"MAILROOM_SMTP_URL", absl::StrCat("smtp://127.0.0.1:", xoauth2)},
      {"MAILROOM_SMTP_USERNAME", "mailbox@example.net"},
      {"MAILROOM_SMTP_CA_FILE", dir_ + "/ok.pem"},
      {"MAILROOM_SMTP_OAUTH2_TOKEN_URL", token_url},
      {"MAILROOM_SMTP_OAUTH2_CLIENT_ID", "doctor-app"},
      {"MAILROOM_SMTP_OAUTH2_CLIENT_SECRET", kClientSecret}};
  ExpectHealthy(oauth2, "authenticated as mailbox@example.net (XOAUTH2, token from 127.0.0.1:");
  // The token itself never shows.
  const std::string issued = testing::Slurp(state);
  const size_t at = issued.find("\"at-");
  ASSERT_NE(at, std::string::npos) << issued;
  const std::string token = issued.substr(at + 1, issued.find('"', at + 1) - at - 1);
  EXPECT_THAT(testing::Slurp(absl::StrCat(dir_, "/doctor-", runs_, ".log")), Not(HasSubstr(token)));

  const std::string account = dir_ + "/account.json";
  const std::string ses = StartSesFront(account);
  ExpectHealthy(SesEnv(ses), "ok   ses: account: production access, sending enabled, HEALTHY, "
                             "0 of 50000 sent in the last 24 hours, at most 14 emails/s");
  EXPECT_THAT(testing::Slurp(absl::StrCat(dir_, "/doctor-", runs_, ".log")),
              HasSubstr("ok   ses: sending identity acme.net is verified"));
}

// --send-test sends one real email through the configured transport: the SMTP peer receives it
// (accepted, exit 0), refuses its recipient (exit 1 with the class), or the address is unusable
// (exit 2). No secret is printed (Doctor checks).
TEST_F(DoctorTest, SendTestSendsOneEmailThroughTheTransport) {
  const int smtp = StartSmtp("ok", {"--auth", absl::StrCat("mailer:", kSmtpPassword),
                                    "--reject-rcpt", "nobody@acme.net"});
  Outcome sent = Doctor(Smtp(smtp), {"--send-test", "ada@acme.net"});
  EXPECT_EQ(sent.code, 0) << sent.out;
  EXPECT_THAT(sent.out, HasSubstr("ok   send-test: accepted by smtp, provider message id "));
  const auto received = testing::Files(absl::StrCat(dir_, "/smtp-", smtp), ".eml");
  ASSERT_EQ(received.size(), 1u) << sent.out;
  EXPECT_THAT(testing::Slurp(received[0]), HasSubstr("ada@acme.net>"));

  Outcome refused = Doctor(Smtp(smtp), {"--send-test=nobody@acme.net"});
  EXPECT_EQ(refused.code, 1) << refused.out;
  EXPECT_THAT(refused.out, HasSubstr("FAIL send-test: refused by smtp: "));
  EXPECT_EQ(testing::Files(absl::StrCat(dir_, "/smtp-", smtp), ".eml").size(), 1u);

  Outcome bad = Doctor(Smtp(smtp), {"--send-test", "not-an-address"});
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_THAT(bad.out, HasSubstr("FAIL send-test: cannot send to that address: "));

  // The sandbox refuses suppressed@ as a provider refuses an address on its suppression list.
  Outcome sandbox = Doctor({{"MAILROOM_TRANSPORT", "sandbox"}},
                           {"--send-test", "suppressed@sandbox.mailroom.test"});
  EXPECT_EQ(sandbox.code, 1) << sandbox.out;
  EXPECT_THAT(sandbox.out, HasSubstr("FAIL send-test: refused by sandbox: recipient rejected "
                                     "(permanent; the address is suppressed): sandbox 406: "));
  Outcome usage = Doctor({}, {"--send-test"});
  EXPECT_EQ(usage.code, 2) << usage.out;
}

TEST_F(DoctorTest, EachMisconfigurationIsOneProblemLine) {
  // SMTP: credentials, certificate (not trusted, another name), reachability, no STARTTLS.
  const int smtp = StartSmtp("ok");
  const std::string at = absl::StrCat("127.0.0.1:", smtp);
  ExpectProblem(With(Smtp(smtp), {{"MAILROOM_SMTP_PASSWORD", kWrongSmtpPassword}}),
                absl::StrCat("FAIL smtp: ", at, ": authentication refused: 535 "));
  ExpectProblem(With(Smtp(smtp), {{"MAILROOM_SMTP_CA_FILE", ""}}),
                absl::StrCat("FAIL smtp: ", at,
                             ": certificate not accepted: SSL certificate "
                             "problem: self-signed certificate"));
  const int other_name = StartSmtp("other");
  ExpectProblem(With(Smtp(other_name), {{"MAILROOM_SMTP_CA_FILE", dir_ + "/other.pem"}}),
                absl::StrCat("FAIL smtp: 127.0.0.1:", other_name,
                             ": certificate not accepted: "
                             "SSL: no alternative certificate subject name matches"));
  const int expired = StartSmtp("expired");
  ExpectProblem(With(Smtp(expired), {{"MAILROOM_SMTP_CA_FILE", dir_ + "/expired.pem"}}),
                absl::StrCat("FAIL smtp: 127.0.0.1:", expired,
                             ": certificate not accepted: SSL "
                             "certificate problem: certificate has expired"));
  const int closed = testing::FreePort();
  ExpectProblem(Smtp(closed), absl::StrCat("FAIL smtp: 127.0.0.1:", closed, ": cannot connect"));
  const int plain = StartSmtp("", {});
  ExpectProblem(With(Smtp(plain), {{"MAILROOM_SMTP_USERNAME", ""}, {"MAILROOM_SMTP_PASSWORD", ""}}),
                absl::StrCat("FAIL smtp: 127.0.0.1:", plain,
                             ": the server does not offer STARTTLS"));

  // XOAUTH2: the token endpoint refuses the client.
  const int token_port = testing::FreePort();
  StartPeer("oauth2_token_endpoint.py",
            {"--port", absl::StrCat(token_port), "--state", dir_ + "/oauth2-state.json",
             "--client-id", "doctor-app", "--client-secret", kClientSecret},
            "oauth2");
  ExpectProblem(With(Smtp(smtp), {{"MAILROOM_SMTP_PASSWORD", ""},
                                  {"MAILROOM_SMTP_OAUTH2_TOKEN_URL",
                                   absl::StrCat("http://127.0.0.1:", token_port, "/token")},
                                  {"MAILROOM_SMTP_OAUTH2_CLIENT_ID", "doctor-app"},
                                  {"MAILROOM_SMTP_OAUTH2_CLIENT_SECRET", kWrongClientSecret}}),
                absl::StrCat("FAIL smtp: no OAuth2 token from 127.0.0.1:", token_port, ": "));

  // SES: the account's state, then credentials, region and endpoint.
  const std::string account = dir_ + "/account.json";
  const std::string ses = StartSesFront(account);
  Write(account, R"({"ProductionAccessEnabled": false})");
  ExpectProblem(SesEnv(ses), "FAIL ses: the account is in the sandbox");
  Write(account, R"({"SendingEnabled": false})");
  ExpectProblem(SesEnv(ses), "FAIL ses: sending is disabled for the account");
  Write(account, R"({"SendQuota": {"Max24HourSend": 200, "SentLast24Hours": 200}})");
  ExpectProblem(SesEnv(ses), "FAIL ses: the 24-hour quota is used up: 200 of 200 sent");
  Write(account, "{}");
  // MAILROOM_FROM's domain not verified, or not an identity at all.
  Write(identities_, R"([{"IdentityName": "acme.net", "IdentityType": "DOMAIN",
                          "SendingEnabled": false, "VerificationStatus": "PENDING"}])");
  ExpectProblem(SesEnv(ses), "FAIL ses: identity acme.net cannot send (VerificationStatus "
                             "PENDING): SES refuses mail from no-reply@acme.net");
  Write(identities_, R"([{"IdentityName": "other.example", "IdentityType": "DOMAIN",
                          "SendingEnabled": true, "VerificationStatus": "SUCCESS"}])");
  ExpectProblem(SesEnv(ses), "FAIL ses: neither no-reply@acme.net nor acme.net is a verified "
                             "identity of the account in this region");
  Write(identities_, R"([{"IdentityName": "no-reply@acme.net", "IdentityType": "EMAIL_ADDRESS",
                          "SendingEnabled": true, "VerificationStatus": "SUCCESS"}])");
  const std::string where = absl::StrCat("GetAccount at ", ses.substr(strlen("http://")));
  ExpectProblem(With(SesEnv(ses), {{"AWS_SECRET_ACCESS_KEY", kWrongAwsSecret}}),
                absl::StrCat("FAIL ses: ", where,
                             " (region us-east-1): credentials, region or "
                             "clock refused: ses 403 SignatureDoesNotMatch"));
  ExpectProblem(With(SesEnv(ses), {{"MAILROOM_SES_REGION", "eu-west-1"}}),
                absl::StrCat("FAIL ses: ", where,
                             " (region eu-west-1): credentials, region or "
                             "clock refused"));
  const int no_ses = testing::FreePort();
  ExpectProblem(With(SesEnv(ses),
                     {{"MAILROOM_SES_ENDPOINT", absl::StrCat("http://127.0.0.1:", no_ses)}}),
                absl::StrCat("FAIL ses: GetAccount at 127.0.0.1:", no_ses,
                             " (region us-east-1): cannot reach the endpoint"));

  // Templates: one that does not parse, a locale without one of its files, a subject that
  // uses the code.
  const std::string broken = dir_ + "/templates-broken";
  fs::create_directories(broken);
  Write(broken + "/password_recovery.html", "<p>{{#code}}{{code}}</p>");
  ExpectProblem({{"MAILROOM_TEMPLATE_DIR", broken}},
                absl::StrCat("FAIL templates: MAILROOM_TEMPLATE_DIR: ", broken,
                             "/password_recovery.html: "));
  const std::string incomplete = dir_ + "/templates-incomplete";
  fs::create_directories(incomplete);
  Write(incomplete + "/activation.fr.subject", "Bienvenue {{login}}");
  Write(incomplete + "/activation.fr.html", "<p>{{link}}</p>");
  Write(incomplete + "/password_recovery.fr.subject", "Réinitialisez votre mot de passe");
  Write(incomplete + "/password_recovery.fr.txt", "{{code}} {{link}}");
  Write(incomplete + "/password_recovery.fr.html", "<p>{{code}}</p>");
  ExpectProblem({{"MAILROOM_TEMPLATE_DIR", incomplete}},
                absl::StrCat("FAIL templates: MAILROOM_TEMPLATE_DIR: ", incomplete,
                             "/activation.fr.txt is missing"));
  const std::string coded = dir_ + "/templates-coded";
  fs::create_directories(coded);
  Write(coded + "/password_recovery.subject", "Your code: {{& code}}");
  ExpectProblem({{"MAILROOM_TEMPLATE_DIR", coded}},
                absl::StrCat("FAIL templates: MAILROOM_TEMPLATE_DIR: ", coded,
                             "/password_recovery.subject: a subject may not use the code"));

  // The file transport's directory takes no file (not even root's).
  ExpectProblem({{"MAILROOM_FILE_DIR", "/proc"}},
                "FAIL file: MAILROOM_FILE_DIR: cannot write in \"/proc\"");

  // The collector: nobody at the address, or the credential refused.
  const int no_collector = testing::FreePort();
  ExpectProblem({{"MAILROOM_COLLECTOR_ADDRESS", absl::StrCat("127.0.0.1:", no_collector)}},
                absl::StrCat("FAIL collector: 127.0.0.1:", no_collector,
                             " (plaintext): unreachable"));
  ExpectProblem({{"MAILROOM_COLLECTOR_TOKEN", kWrongBearer}},
                absl::StrCat("FAIL collector: 127.0.0.1:", collector_port_,
                             " (plaintext): the credential is refused"));

  // TLS to a collector that serves plaintext.
  ExpectProblem({{"MAILROOM_COLLECTOR_TLS", "true"}},
                absl::StrCat("FAIL collector: 127.0.0.1:", collector_port_,
                             " (TLS): TLS failed: "));

  // A configuration that does not load: as the service says it, exit status 2.
  Outcome o = Doctor({{"MAILROOM_TRANSPORT", "smtp"},
                      {"MAILROOM_SMTP_PASSWORD", kSmtpPassword},
                      {"MAILROOM_SMTP_URL", "http://127.0.0.1:25"}});
  EXPECT_EQ(o.code, 2) << o.out;
  EXPECT_THAT(o.out, HasSubstr("config error: MAILROOM_SMTP_URL: must start with smtp://"))
      << o.out;
}

// The provider transports: each key proved by the provider's cheapest authenticated read
// against its stand-in, nothing sent; a refused key, a key without the right to send, a
// missing Mailgun domain are one problem line each.
TEST_F(DoctorTest, ProviderKeysAreProvedWithoutSending) {
  const std::string key = "pr0vider-d0ctor-k3y";
  auto start = [&](const std::string& provider, std::vector<std::string> extra) {
    const int port = testing::FreePort();
    std::vector<std::string> args = {"--port", absl::StrCat(port), "--provider", provider, "--key",
                                     key,      "--domain",         "mg.acme.net"};
    args.insert(args.end(), extra.begin(), extra.end());
    StartPeer("provider_standin.py", args, absl::StrCat(provider, "-", port));
    return absl::StrCat("http://127.0.0.1:", port);
  };
  auto env = [&](const std::string& provider, const std::string& url, const std::string& k) {
    const std::string upper = absl::AsciiStrToUpper(provider);
    return std::map<std::string, std::string>{
        {"MAILROOM_TRANSPORT", provider},
        {absl::StrCat("MAILROOM_", upper, provider == "postmark" ? "_SERVER_TOKEN" : "_API_KEY"),
         k},
        {absl::StrCat("MAILROOM_", upper, "_API_URL"), url},
        {"MAILROOM_MAILGUN_DOMAIN", "mg.acme.net"}};
  };
  for (const std::string provider : {"postmark", "sendgrid", "mailgun", "resend"}) {
    SCOPED_TRACE(provider);
    const std::string url = start(provider, {});
    const std::string host = url.substr(strlen("http://"));
    ExpectHealthy(env(provider, url, key), absl::StrCat("ok   ", provider, ": "));
    Outcome ok = Doctor(env(provider, url, key));
    EXPECT_THAT(ok.out, HasSubstr(absl::StrCat(" accepted by ", host))) << ok.out;
    EXPECT_THAT(ok.out,
                HasSubstr(absl::StrCat("ok   ", provider, ": not checked without sending: ")));
    EXPECT_THAT(ok.out, Not(HasSubstr(key)));
    if (provider == "mailgun") {
      // A wrong key and a domain sending key look alike from a read: a warning.
      Outcome wrong = Doctor(env(provider, url, "wr0ng-k3y"));
      EXPECT_EQ(wrong.code, 0) << wrong.out;
      EXPECT_THAT(wrong.out, HasSubstr(absl::StrCat("warn mailgun: ", host,
                                                    " refused to show "
                                                    "domain mg.acme.net (mailgun 401)")));
      ExpectProblem(With(env(provider, url, key), {{"MAILROOM_MAILGUN_DOMAIN", "mg.other.net"}}),
                    absl::StrCat("FAIL mailgun: no sending domain mg.other.net at ", host));
    } else {
      ExpectProblem(env(provider, url, "wr0ng-k3y"),
                    absl::StrCat("FAIL ", provider, ": credentials refused by ", host, " ("));
    }
  }
  const std::string restricted = start("resend", {"--restricted"});
  ExpectHealthy(env("resend", restricted, key), "ok   resend: API key accepted by 127.0.0.1:");
  EXPECT_THAT(testing::Slurp(absl::StrCat(dir_, "/doctor-", runs_, ".log")),
              HasSubstr("(sending access only)"));
  const std::string no_send = start("sendgrid", {"--scopes", "stats.read"});
  ExpectProblem(env("sendgrid", no_send, key), "FAIL sendgrid: the API key lacks the mail.send "
                                               "scope");
  const int closed = testing::FreePort();
  ExpectProblem(env("postmark", absl::StrCat("http://127.0.0.1:", closed), key),
                absl::StrCat("FAIL postmark: cannot reach 127.0.0.1:", closed, ": "));
}

}  // namespace
}  // namespace mailroom
