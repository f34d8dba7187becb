// The providers' feedback paths over real HTTP on loopback (libcurl to a FeedbackServer), with
// a real PostgreSQL behind the FeedbackStore: each provider's published sample, signed as that
// provider signs (with this test's keys and clock), is recorded; every forgery in the table is
// refused and changes nothing in the database.
#include "collector/feedback/provider_feedback.h"

#include <cstring>
#include <pqxx/pqxx>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "collector/feedback/feedback_server.h"
#include "collector/feedback/testing/provider_samples.h"
#include "collector/feedback/testing/provider_signer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing/migrated_database.h"

namespace mailroom {
namespace {

using Headers = std::vector<std::string>;

constexpr char kPostmarkCredentials[] = "postmark:9b3e1c0f7a6d4e25";
const std::string kResendSecret = absl::StrCat("whsec_", absl::Base64Escape(std::string(32, 'r')));
const std::string kHttpSecret = absl::StrCat("whsec_", absl::Base64Escape(std::string(32, 'h')));
const std::string kSandboxSecret = absl::StrCat("whsec_", absl::Base64Escape(std::string(32, 's')));
constexpr char kMailgunKey[] = "key-3ax6xnjp29jd6fds4gc373sgvjxteol0";

// The sample's message ids as each provider's API answered them, recorded by the sender.
constexpr char kPostmarkId[] = "883953f4-6105-42a2-a16a-77a8eac79483";
constexpr char kSendgridId[] = "14c5d75ce93";
constexpr char kMailgunId[] = "<20130503182626.18666.16540@sandbox.mailgun.org>";
constexpr char kResendId[] = "56761188-7520-42d8-8898-ff6fc54ce618";
constexpr char kHttpId[] = "msg_mailroom_4711";

using Answer = testing::WebhookAnswer;

class ProviderFeedbackTest : public testing::MigratedDatabaseTest {
 protected:
  void SetUp() override {
    MigratedDatabaseTest::SetUp();
    if (HasFatalFailure()) return;
    feedback_ = NewPgFeedbackStore(url_);
    Exec("SELECT mailroom_ensure_group('mailroom', true)");
    ProviderFeedbackOptions o;
    o.postmark_credentials = kPostmarkCredentials;
    o.sendgrid_key = *ParseSendgridKey(sendgrid_.PublicKey());
    o.mailgun_signing_key = kMailgunKey;
    o.resend_keys = *ParseWebhookSecrets(kResendSecret);
    o.http_keys = *ParseWebhookSecrets(kHttpSecret);
    o.sandbox_keys = *ParseWebhookSecrets(kSandboxSecret);
    providers_ = std::make_unique<ProviderFeedbackHandler>(o, feedback_.get(), 3, &metrics_,
                                                           [this] { return Now(); });
    routes_ = std::make_unique<FeedbackRoutes>(nullptr, providers_.get());
    ASSERT_TRUE(server_.Start("127.0.0.1:0", routes_.get()).ok());
    SendTo({{"john@example.com", kPostmarkId},
            {"example@test.com", kSendgridId},
            {"alice@example.com", kMailgunId},
            {"delivered@resend.dev", kResendId},
            {"bob@example.com", kHttpId}});
  }
  void TearDown() override { server_.Stop(); }

  absl::Time Now() {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }

  // One account per (address, provider id): the samples' recipients, each activation leased by
  // group "mailroom" and acknowledged SENT with that provider id.
  void SendTo(const std::vector<std::pair<std::string, std::string>>& sent) {
    for (const auto& [address, id] : sent) {
      Exec(absl::StrCat("INSERT INTO accounts (email, login) VALUES (", conn_->quote(address), ", ",
                        conn_->quote(address), ")"));
    }
    CollectSignups();
    std::vector<testing::Leased> jobs = Dequeue(static_cast<int>(sent.size()));
    ASSERT_EQ(jobs.size(), sent.size());
    std::vector<std::string> ids;
    for (const testing::Leased& j : jobs) {
      const std::string address = Text(absl::StrCat(
          "SELECT a.email FROM tokens t JOIN accounts a ON a.id = t.account WHERE t.id = ", j.id));
      for (const auto& [a, id] : sent) {
        if (a == address) ids.push_back(id);
      }
    }
    ASSERT_EQ(ids.size(), sent.size());
    ASSERT_EQ(AckSent(jobs, ids), static_cast<int64_t>(sent.size()));
  }

  Answer Post(const std::string& path, const std::string& body, const Headers& headers) {
    return testing::PostWebhook(absl::StrCat("http://127.0.0.1:", server_.port(), path), body,
                                headers);
  }

  // Each provider's request as the provider would send it, signed at `at`.
  Headers Postmark(const std::string& credentials = kPostmarkCredentials) {
    return testing::PostmarkHeaders(credentials);
  }
  Headers Sendgrid(const std::string& body, absl::Time at) { return sendgrid_.Headers(body, at); }
  std::string MailgunSigned(const std::string& body, absl::Time at,
                            const std::string& key = kMailgunKey) {
    return testing::MailgunSigned(body, key, at,
                                  absl::StrCat("token-", ++tokens_, "-0123456789abcdef0123456789"));
  }
  Headers Standard(const char* prefix, const std::string& secret, const std::string& id,
                   const std::string& body, absl::Time at) {
    return testing::StandardWebhookHeaders(prefix, secret, id, body, at);
  }

  // Everything feedback may change, in one line.
  std::string State() {
    return absl::StrCat(
        "suppressions=", Int("SELECT count(*) FROM suppressions"),
        " events=", Int("SELECT count(*) FROM sns_messages"),
        " bounced=", Int("SELECT count(*) FROM delivery_states WHERE bounced_at IS NOT NULL"),
        " complained=", Int("SELECT count(*) FROM delivery_states WHERE complained_at IS NOT NULL"),
        " delivered=", Int("SELECT count(*) FROM delivery_states WHERE delivered_at IS NOT NULL"),
        " soft=", Int("SELECT count(*) FROM soft_bounces"),
        " counters=", Int("SELECT count(*) FROM reputation_hourly WHERE provider <> ''"));
  }
  int64_t Suppressed(const std::string& address, const std::string& reason,
                     const std::string& source) {
    return Int(absl::StrCat("SELECT count(*) FROM suppressions WHERE address = '", address,
                            "' AND reason = '", reason, "' AND source = '", source, "'"));
  }
  int64_t Bounced(const std::string& provider_id, const std::string& provider) {
    return Int(absl::StrCat("SELECT count(*) FROM delivery_states WHERE bounced_at IS NOT NULL"
                            " AND bounce_type = 'Permanent' AND provider_message_id = '",
                            provider_id, "'")) +
           100 * Int(absl::StrCat("SELECT coalesce(sum(bounced), 0) FROM reputation_hourly"
                                  " WHERE provider = '",
                                  provider, "'"));
  }

  absl::Mutex mu_;
  // Postmark's samples happened at 16:33:54 that day: the clock stands a minute later.
  absl::Time now_ ABSL_GUARDED_BY(mu_) = absl::FromUnixSeconds(1572971694);
  testing::SendgridSigner sendgrid_;
  int tokens_ = 0;
  Metrics metrics_;
  std::unique_ptr<FeedbackStore> feedback_;
  std::unique_ptr<ProviderFeedbackHandler> providers_;
  std::unique_ptr<FeedbackRoutes> routes_;
  FeedbackServer server_;
};

TEST_F(ProviderFeedbackTest, EachProvidersSampleIsRecordedOnceOnItsPath) {
  const absl::Time now = Now();
  using testing::kHttpReportBounced;
  std::string mailgun = MailgunSigned(testing::kMailgunPermanentFailure, now);
  struct Case {
    const char* provider;
    std::string body;
    Headers headers;
    const char* address;
    const char* reason;
    const char* source;
    const char* message_id;
  } cases[] = {
      {"postmark", testing::kPostmarkBounce, Postmark(), "john@example.com", "hard_bounce",
       "postmark bounce: Permanent HardBounce", kPostmarkId},
      {"sendgrid", testing::kSendgridEvents, Sendgrid(testing::kSendgridEvents, now),
       // The batch's spam report follows its bounce: a complaint's entry outranks a bounce's.
       "example@test.com", "complaint", "sendgrid complaint spamreport", kSendgridId},
      {"mailgun",
       mailgun,
       {},
       "alice@example.com",
       "hard_bounce",
       "mailgun bounce: Permanent suppress-bounce 605",
       kMailgunId},
      {"resend", testing::kResendBounced,
       Standard("svix-", kResendSecret, "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", testing::kResendBounced,
                now),
       "delivered@resend.dev", "hard_bounce", "resend bounce: Permanent Suppressed", kResendId},
      {"http", kHttpReportBounced,
       Standard("webhook-", kHttpSecret, "evt_1", kHttpReportBounced, now), "bob@example.com",
       "hard_bounce", "http bounce: Permanent 550 5.1.1 user unknown", kHttpId},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.provider);
    const std::string path = absl::StrCat("/feedback/", c.provider);
    Answer a = Post(path, c.body, c.headers);
    EXPECT_EQ(a.status, 200) << a.body;
    EXPECT_EQ(a.body, "recorded");
    EXPECT_EQ(Suppressed(c.address, c.reason, c.source), 1);
    EXPECT_EQ(Bounced(c.message_id, c.provider), 101);  // the delivery, and the counter
    // The provider's retry of the same event changes nothing.
    const std::string before = State();
    Answer again = Post(path, c.body, c.headers);
    EXPECT_EQ(again.status, 200);
    EXPECT_EQ(again.body, "duplicate");
    EXPECT_EQ(State(), before);
  }
  // SendGrid's batch also held a delivery and a complaint of the same message.
  EXPECT_EQ(Int("SELECT count(*) FROM delivery_states WHERE provider_message_id = '14c5d75ce93'"
                " AND delivered_at IS NOT NULL AND complained_at IS NOT NULL"),
            1);
  EXPECT_EQ(State(),
            "suppressions=5 events=7 bounced=5 complained=1 delivered=1 soft=0 counters=7");
  // Per group and provider.
  auto rows = feedback_->ReputationByProvider(absl::Hours(24 * 7));
  ASSERT_TRUE(rows.ok()) << rows.status();
  std::vector<std::string> seen;
  for (const ProviderReputationRow& r : *rows) {
    seen.push_back(absl::StrCat(r.group, "/", r.provider, ":", r.delivered, ",", r.bounced, ",",
                                r.complained));
  }
  EXPECT_THAT(seen, ::testing::ElementsAre("mailroom/http:0,1,0", "mailroom/mailgun:0,1,0",
                                           "mailroom/postmark:0,1,0", "mailroom/resend:0,1,0",
                                           "mailroom/sendgrid:1,1,1"));
}

TEST_F(ProviderFeedbackTest, EveryForgeryIsRefusedAndChangesNothing) {
  const absl::Time now = Now();
  const absl::Time old = now - absl::Hours(2);
  const std::string empty = State();
  std::string soft_postmark = testing::kPostmarkBounce;
  soft_postmark.replace(soft_postmark.find("john@"), 5, "mary@");
  const std::string sg = testing::kSendgridEvents;
  const std::string sg_altered = std::string(sg).replace(sg.find("example@test.com"), 7, "victim1");
  const std::string resend = testing::kResendBounced;
  const std::string resend_altered = std::string(resend).replace(resend.find("delivered@"), 9,
                                                                 "victim2@x");
  const std::string http = testing::kHttpReportBounced;
  const std::string http_altered = std::string(http).replace(http.find("bob@"), 3, "eve");
  struct Forgery {
    const char* what;
    const char* provider;
    std::string body;
    Headers headers;
    long status;
  } forgeries[] = {
      {"no credentials", "postmark", testing::kPostmarkBounce, {}, 401},
      {"wrong credentials", "postmark", testing::kPostmarkBounce,
       Postmark("postmark:9b3e1c0f7a6d4e26"), 401},
      {"wrong user", "postmark", testing::kPostmarkBounce, Postmark("other:9b3e1c0f7a6d4e25"), 401},
      {"an event older than the window", "postmark",
       std::string(testing::kPostmarkBounce)
           .replace(soft_postmark.find("2019-11-05T16"), 13, "2019-11-05T14"),
       Postmark(), 403},
      {"wrong signature", "sendgrid", sg, Sendgrid(sg_altered, now), 403},
      {"altered body", "sendgrid", sg_altered, Sendgrid(sg, now), 403},
      {"old timestamp", "sendgrid", sg, Sendgrid(sg, old), 403},
      {"no signature", "sendgrid", sg, {}, 403},
      {"wrong key",
       "mailgun",
       MailgunSigned(testing::kMailgunPermanentFailure, now, "key-other"),
       {},
       403},
      {"old timestamp", "mailgun", MailgunSigned(testing::kMailgunPermanentFailure, old), {}, 403},
      {"the documented signature (another key)",
       "mailgun",
       testing::kMailgunPermanentFailure,
       {},
       403},
      {"wrong secret", "resend", resend, Standard("svix-", kHttpSecret, "msg_a", resend, now), 403},
      {"altered body", "resend", resend_altered,
       Standard("svix-", kResendSecret, "msg_a", resend, now), 403},
      {"old timestamp", "resend", resend, Standard("svix-", kResendSecret, "msg_a", resend, old),
       403},
      {"webhook- headers on the svix path", "resend", resend,
       Standard("webhook-", kResendSecret, "msg_a", resend, now), 403},
      {"wrong secret", "http", http, Standard("webhook-", kResendSecret, "evt_a", http, now), 403},
      {"altered body", "http", http_altered, Standard("webhook-", kHttpSecret, "evt_a", http, now),
       403},
      {"old timestamp", "http", http, Standard("webhook-", kHttpSecret, "evt_a", http, old), 403},
      {"an unknown provider", "mailchimp", http, {}, 404},
  };
  for (const Forgery& f : forgeries) {
    SCOPED_TRACE(absl::StrCat(f.provider, ": ", f.what));
    Answer a = Post(absl::StrCat("/feedback/", f.provider), f.body, f.headers);
    EXPECT_EQ(a.status, f.status) << a.body;
    EXPECT_EQ(State(), empty);
  }
  // Correctly signed events of kinds mailroom does not record: acknowledged, nothing changed.
  EXPECT_EQ(Post("/feedback/postmark", testing::kPostmarkOpen, Postmark()).body, "ignored");
  EXPECT_EQ(Post("/feedback/resend", testing::kResendOpened,
                 Standard("svix-", kResendSecret, "msg_o", testing::kResendOpened, now))
                .body,
            "ignored");
  EXPECT_EQ(State(), empty);
  // A signature given twice is not read at all.
  Headers twice = Standard("webhook-", kHttpSecret, "evt_b", http, now);
  twice.push_back(twice.back());
  EXPECT_EQ(Post("/feedback/http", http, twice).status, 403);
  EXPECT_EQ(State(), empty);
}

TEST_F(ProviderFeedbackTest, ACapturedRequestReplayedLaterIsRefused) {
  const std::string http = testing::kHttpReportBounced;
  Headers signed_now = Standard("webhook-", kHttpSecret, "evt_r", http, Now());
  EXPECT_EQ(Post("/feedback/http", http, signed_now).body, "recorded");
  const std::string after = State();
  // Within the window the event id makes it a duplicate; past the window it is refused unread.
  EXPECT_EQ(Post("/feedback/http", http, signed_now).body, "duplicate");
  Advance(absl::Hours(1) + absl::Seconds(1));
  EXPECT_EQ(Post("/feedback/http", http, signed_now).status, 403);
  // The same bounce again under a new event id: the address stays suppressed once.
  Headers renamed = Standard("webhook-", kHttpSecret, "evt_s", http, Now());
  EXPECT_EQ(Post("/feedback/http", http, renamed).body, "recorded");
  EXPECT_EQ(Int("SELECT count(*) FROM suppressions"), 1);
  EXPECT_NE(State(), after);
}

// Mailgun signs the timestamp and a token, not the body: a captured signature object put on
// another body is refused because its token was used (by the genuine request, which HTTPS
// delivers first to the endpoint), and changes nothing.
TEST_F(ProviderFeedbackTest, AMailgunSignatureCarriesOneBodyOnly) {
  const std::string genuine = MailgunSigned(testing::kMailgunPermanentFailure, Now());
  EXPECT_EQ(Post("/feedback/mailgun", genuine, {}).body, "recorded");
  const std::string after = State();
  std::string altered = genuine;
  altered.replace(altered.find("\"alice@example.com\""), 7, "\"carol");
  ASSERT_NE(altered, genuine);
  Answer a = Post("/feedback/mailgun", altered, {});
  EXPECT_EQ(a.status, 200);
  EXPECT_EQ(a.body, "duplicate");
  EXPECT_EQ(State(), after);
  EXPECT_EQ(Int("SELECT count(*) FROM suppressions WHERE address LIKE 'carol%'"), 0);
}

TEST_F(ProviderFeedbackTest, SoftBouncesCountAsSesTransientOnes) {
  // Mailgun's "old" failure (given up after retrying) three times within 7 days, each a new
  // event: suppressed at the limit (3), as SES's transient bounces are.
  for (int i = 1; i <= 3; ++i) {
    nlohmann::json j = nlohmann::json::parse(testing::kMailgunPermanentFailure);
    j["event-data"]["reason"] = "old";
    j["event-data"]["id"] = absl::StrCat("soft-", i);
    Answer a = Post("/feedback/mailgun", MailgunSigned(j.dump(), Now()), {});
    EXPECT_EQ(a.body, "recorded");
    EXPECT_EQ(Int("SELECT count(*) FROM suppressions WHERE address = 'alice@example.com'"),
              i == 3 ? 1 : 0);
  }
  EXPECT_EQ(Int("SELECT count(*) FROM soft_bounces WHERE address = 'alice@example.com'"), 3);
  EXPECT_EQ(Text("SELECT source FROM suppressions"),
            "mailgun bounce: 3 transient bounces within 7 days old 605");
}

// A signed event about no delivery of ours (here Postmark's bounce for a message id nobody sent)
// is answered `unmatched`, counted, and suppresses nothing; with the provider in
// suppress_unmatched (MAILROOM_FEEDBACK_SUPPRESS_UNMATCHED) it suppresses its recipient.
TEST_F(ProviderFeedbackTest, AnUnmatchedSignedBounceSuppressesNothingUnlessOptedIn) {
  std::string stray = testing::kPostmarkBounce;
  stray.replace(stray.find(kPostmarkId), strlen(kPostmarkId),
                "00000000-0000-0000-0000-000000000000");
  const std::string empty = State();
  Answer a = Post("/feedback/postmark", stray, Postmark());
  EXPECT_EQ(a.status, 200);
  EXPECT_EQ(a.body, "unmatched");
  EXPECT_EQ(Int("SELECT count(*) FROM suppressions"), 0);
  EXPECT_EQ(Int("SELECT count(*) FROM delivery_states WHERE bounced_at IS NOT NULL"), 0);
  EXPECT_EQ(metrics_.Value("mailroom_collector_feedback_unmatched_total",
                           {{"provider", "postmark"}, {"reason", "no_delivery"}}),
            1);

  ProviderFeedbackOptions o;
  o.postmark_credentials = kPostmarkCredentials;
  o.suppress_unmatched = {"postmark"};
  ProviderFeedbackHandler opted(o, feedback_.get(), 3, &metrics_, [this] { return Now(); });
  std::string again = stray;
  again.replace(again.find("4323372036854775807"), 19, "4323372036854775808");  // a new event id
  HttpRequest r;
  r.body = again;
  r.headers = {{"Authorization", Postmark()[0].substr(strlen("Authorization: "))}};
  HttpReply reply = opted.Post("postmark", r);
  EXPECT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(reply.body, "unmatched");
  EXPECT_EQ(Suppressed("john@example.com", "hard_bounce", "postmark bounce: Permanent HardBounce"),
            1);
  EXPECT_EQ(Int("SELECT count(*) FROM delivery_states WHERE bounced_at IS NOT NULL"), 0);
  EXPECT_EQ(metrics_.Value("mailroom_collector_feedback_unmatched_total",
                           {{"provider", "postmark"}, {"reason", "no_delivery"}}),
            2);
}

// Each group's service signs its reports with a secret of its group's
// (MAILROOM_FEEDBACK_HTTP_GROUP_SECRETS). A report signed with group "mailroom"'s secret that
// names a delivery of group "other" (its message id, or its group and job id) is answered 200
// `unmatched` (the report was taken; a retry changes nothing) and changes nothing of "other":
// no complaint, its reputation unchanged, nothing suppressed. Signed with "other"'s secret, the
// same report is recorded on "other"'s delivery; the secret that covers every group still works.
TEST_F(ProviderFeedbackTest, AReportSignedWithAGroupsSecretChangesNothingOfAnotherGroup) {
  const std::string mailroom_secret = absl::StrCat("whsec_",
                                                   absl::Base64Escape(std::string(32, 'm')));
  const std::string other_secret = absl::StrCat("whsec_", absl::Base64Escape(std::string(32, 'o')));
  // Group "other" sends carol's activation too, with message id msg_other_<job id>.
  Exec("INSERT INTO accounts (email, login) VALUES ('carol@example.com', 'carol')");
  CollectSignups();
  Exec("SELECT mailroom_ensure_group('other', true)");
  const int64_t job = Int("SELECT t.id FROM tokens t JOIN accounts a ON a.id = t.account"
                          " WHERE a.email = 'carol@example.com'");
  {
    pqxx::work tx(*conn_);
    for (const auto& row : tx.exec("SELECT job_id, attempt FROM mailroom_dequeue('other', 100,"
                                   " 's2', 60000)")) {
      if (row[0].as<int64_t>() != job) continue;
      tx.exec_params1(
          "SELECT count(*) FROM mailroom_ack('other', 's2', ARRAY[$1::bigint], ARRAY[$2::int],"
          " ARRAY['sent'], ARRAY[''], ARRAY[0], ARRAY[0::bigint], ARRAY['msg_other_' || $1])",
          job, row[1].as<int>());
    }
    tx.exec("SELECT mailroom_record_sent('other', 1, '{}', '{}')");
    tx.commit();
  }
  ASSERT_EQ(Int(absl::StrCat("SELECT count(*) FROM delivery_states d JOIN consumer_groups g ON"
                             " g.id = d.group_id WHERE g.name = 'other' AND d.token_id = ",
                             job, " AND d.provider_message_id = 'msg_other_", job, "'")),
            1);
  ProviderFeedbackOptions o;
  o.http_keys = *ParseWebhookSecrets(kHttpSecret);
  o.http_group_keys = {{"mailroom", *ParseWebhookSecrets(mailroom_secret)},
                       {"other", *ParseWebhookSecrets(other_secret)}};
  o.suppress_unmatched = {"http"};  // never for a report signed with a group's secret
  ProviderFeedbackHandler handler(o, feedback_.get(), 3, &metrics_, [this] { return Now(); });
  auto post = [&](const std::string& secret, const std::string& id, const nlohmann::json& body) {
    HttpRequest r;
    r.body = body.dump();
    for (const std::string& h : Standard("webhook-", secret, id, r.body, Now())) {
      const size_t colon = h.find(':');
      r.headers.emplace_back(h.substr(0, colon), h.substr(colon + 2));
    }
    return handler.Post("http", r);
  };
  nlohmann::json by_id = {{"type", "email.complained"},
                          {"message_id", absl::StrCat("msg_other_", job)},
                          {"recipients", {"carol@example.com"}}};
  nlohmann::json by_job = {{"type", "email.complained"},
                           {"group", "other"},
                           {"job_id", absl::StrCat(job)},
                           {"recipients", {"carol@example.com"}}};
  auto other_state = [&] {
    return absl::StrCat(
        Int("SELECT count(*) FROM delivery_states d JOIN consumer_groups g ON g.id = d.group_id"
            " WHERE g.name = 'other' AND d.complained_at IS NOT NULL"),
        " complaints, reputation ",
        Text("SELECT coalesce(sum(r.sent), 0) || '/' || coalesce(sum(r.complained), 0) FROM"
             " reputation_hourly r JOIN consumer_groups g ON g.id = r.group_id"
             " WHERE g.name = 'other'"),
        ", suppressions ", Int("SELECT count(*) FROM suppressions"));
  };
  EXPECT_EQ(other_state(), "0 complaints, reputation 1/0, suppressions 0");
  for (const auto& [id, body] : {std::pair{"evt_x1", by_id}, std::pair{"evt_x2", by_job}}) {
    SCOPED_TRACE(id);
    HttpReply reply = post(mailroom_secret, id, body);
    EXPECT_EQ(reply.status, 200) << reply.body;
    EXPECT_EQ(reply.body, "unmatched");
    EXPECT_EQ(other_state(), "0 complaints, reputation 1/0, suppressions 0");
  }
  EXPECT_EQ(metrics_.Value("mailroom_collector_feedback_unmatched_total",
                           {{"provider", "http"}, {"reason", "other_group"}}),
            2);
  // Signed with "other"'s secret, the same report is about its own delivery: recorded. The
  // event ids are the group's own (the "mailroom" reports above did not take them).
  HttpReply own = post(other_secret, "evt_x1", by_id);
  EXPECT_EQ(own.body, "recorded");
  EXPECT_EQ(other_state(), "1 complaints, reputation 1/1, suppressions 1");
  // The secret that covers every group reaches any group's delivery.
  HttpReply all = post(kHttpSecret, "evt_x3", by_job);
  EXPECT_EQ(all.body, "recorded");
  // A secret of no group is refused: 403, nothing recorded.
  const std::string stranger = absl::StrCat("whsec_", absl::Base64Escape(std::string(32, 's')));
  EXPECT_EQ(post(stranger, "evt_x4", by_id).status, 403);
}

// The sender's sandbox transport reports in the delivery reports' shape on a path of its own,
// signed with its own secret: its events are the sandbox's (suppression source, counters), an
// event mailroom does not record (a delay) is ignored, and an unmatched event's id is spent (the
// sandbox posts it again under a new id).
TEST_F(ProviderFeedbackTest, TheSandboxsEventsAreRecordedAsTheSandboxs) {
  SendTo({{"bounce@sandbox.mailroom.test", "sbx-00000000000000000000000000000001"},
          {"complaint@sandbox.mailroom.test", "sbx-00000000000000000000000000000002"}});
  auto report = [](const std::string& type, const std::string& id, const std::string& to) {
    nlohmann::json j = {{"type", type},
                        {"message_id", id},
                        {"job_id", "0"},
                        {"group", "mailroom"},
                        {"recipients", {to}}};
    if (type == "email.bounced") j["bounce_type"] = "permanent";
    if (type == "email.bounced") j["reason"] = "sandbox: 550 5.1.1 mailbox does not exist";
    return j.dump();
  };
  // Posts `body` signed with the sandbox's secret under webhook-id `id`; the answer's body.
  auto post = [&](const std::string& body, const std::string& id) {
    return Post("/feedback/sandbox", body, Standard("webhook-", kSandboxSecret, id, body, Now()))
        .body;
  };
  const std::string bounce = report("email.bounced", "sbx-00000000000000000000000000000001",
                                    "bounce@sandbox.mailroom.test");
  // Signed with another path's secret: refused.
  EXPECT_EQ(Post("/feedback/sandbox", bounce,
                 Standard("webhook-", kHttpSecret, "e1", bounce, Now()))
                .status,
            403);
  EXPECT_EQ(post(bounce, "sbx_1_bounce"), "recorded");
  EXPECT_EQ(Suppressed("bounce@sandbox.mailroom.test", "hard_bounce",
                       "sandbox bounce: Permanent sandbox: 550 5.1.1 mailbox does not exist"),
            1);
  EXPECT_EQ(Bounced("sbx-00000000000000000000000000000001", "sandbox"), 101);

  const std::string complaint = report("email.complained", "sbx-00000000000000000000000000000002",
                                       "complaint@sandbox.mailroom.test");
  EXPECT_EQ(post(complaint, "sbx_2_complaint"), "recorded");
  EXPECT_EQ(Int("SELECT coalesce(sum(complained), 0) FROM reputation_hourly"
                " WHERE provider = 'sandbox'"),
            1);
  EXPECT_EQ(post(report("email.delivery_delayed", "sbx-00000000000000000000000000000002",
                        "complaint@sandbox.mailroom.test"),
                 "sbx_2_delayed"),
            "ignored");

  // Before the acknowledgement: unmatched, and its id is spent; a new id is a new event.
  const std::string early = report("email.delivered", "sbx-not-acknowledged-yet",
                                   "delivered@sandbox.mailroom.test");
  EXPECT_EQ(post(early, "sbx_3_delivered"), "unmatched");
  EXPECT_EQ(post(early, "sbx_3_delivered"), "duplicate");
  EXPECT_EQ(post(early, "sbx_3_delivered.2"), "unmatched");
}

TEST_F(ProviderFeedbackTest, ThePathsOfProvidersNotConfiguredAnswer404) {
  ProviderFeedbackOptions only_http;
  only_http.http_keys = *ParseWebhookSecrets(kHttpSecret);
  EXPECT_THAT(only_http.Enabled(), ::testing::ElementsAre("http"));
  ProviderFeedbackHandler handler(only_http, feedback_.get(), 3, &metrics_);
  HttpRequest r;
  r.body = testing::kPostmarkBounce;
  r.headers = {{"Authorization", "Basic x"}};
  EXPECT_EQ(handler.Post("postmark", r).status, 404);
  EXPECT_EQ(handler.Post("sandbox", r).status, 404);
  EXPECT_EQ(handler.Post("sns", r).status, 404);
  // Without an SNS handler, the SNS paths answer 404 too.
  EXPECT_EQ(Post("/sns", "{}", {}).status, 404);
  EXPECT_EQ(Post("/feedback/sns", "{}", {}).status, 404);
}

}  // namespace
}  // namespace mailroom
