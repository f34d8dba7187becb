// ParseCredentials (MAILROOM_SUBSCRIBER_TOKENS) and the Authenticator's principals.
#include "collector/api/auth.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/test/server_context_test_spouse.h"
#include "gtest/gtest.h"

namespace mailroom {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kVar[] = "MAILROOM_SUBSCRIBER_TOKENS";
constexpr char kSub[] = "sender-token-0123456789";
constexpr char kOps[] = "operator-token-0123456789";

TEST(ParseCredentialsTest, ScopedEntries) {
  auto c = ParseCredentials({std::string(kSub) + "@mailroom+audit:subscriber",
                             std::string(kOps) + "@*:operator",
                             "both-roles-token-0123@audit:subscriber+operator"},
                            kVar);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->size(), 3u);
  EXPECT_EQ((*c)[0].token, kSub);
  EXPECT_EQ((*c)[0].principal.roles, kRoleSubscriber);
  EXPECT_FALSE((*c)[0].principal.all_groups);
  EXPECT_THAT((*c)[0].principal.groups, ElementsAre("mailroom", "audit"));
  EXPECT_FALSE((*c)[0].legacy);
  EXPECT_EQ((*c)[1].principal.roles, kRoleOperator);
  EXPECT_TRUE((*c)[1].principal.all_groups);
  EXPECT_TRUE((*c)[1].principal.InGroup("anything"));
  EXPECT_EQ((*c)[2].principal.roles, kAllRoles);
}

// `sender` and its former name `subscriber` are one role (the one whose jobs carry tokens and
// codes); `observer` subscribes without them. Only the former name is flagged for a warning.
TEST(ParseCredentialsTest, SenderObserverAndTheFormerSubscriberName) {
  auto c = ParseCredentials(
      {"sender-token-01234567@mailroom:sender", "former-token-01234567@mailroom:subscriber",
       "observer-token-0123456@audit:observer", "watching-operator-0123@audit:observer+operator"},
      kVar);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*c)[0].principal.roles, kRoleSubscriber);
  EXPECT_FALSE((*c)[0].subscriber_named);
  EXPECT_EQ((*c)[1].principal.roles, kRoleSubscriber);
  EXPECT_TRUE((*c)[1].subscriber_named);
  EXPECT_EQ((*c)[2].principal.roles, kRoleObserver);
  EXPECT_EQ((*c)[3].principal.roles, kRoleObserver | kRoleOperator);
  EXPECT_TRUE((*c)[0].principal.ReceivesSecrets());
  EXPECT_TRUE((*c)[1].principal.ReceivesSecrets());
  EXPECT_FALSE((*c)[2].principal.ReceivesSecrets());
  EXPECT_FALSE((*c)[3].principal.ReceivesSecrets());
  // Full access (legacy tokens, mutual TLS, the development switch) is a sender's too.
  EXPECT_TRUE(Principal::Everything().ReceivesSecrets());
  EXPECT_TRUE(CheckScope((*c)[2].principal, kSubscribingRoles, "audit", "Subscribe").ok());
  grpc::Status st = CheckScope((*c)[2].principal, kRoleSubscriber, "audit", "AcquireBudget");
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(st.error_message(),
              HasSubstr("AcquireBudget needs the sender role; this credential has the observer "
                        "role"));
}

// An observer never shares a group with a sender credential: a configuration where an
// observer names a group a sender names or serves by `*` (an unscoped token is a sender of
// every group), or where both are `*`, is refused by entry position and group, never a token.
TEST(CheckObserversApartTest, AnObserverInASendersGroupIsAConfigurationError) {
  struct Case {
    std::vector<std::string> entries;
    std::string error;  // "" when accepted
  };
  const std::vector<Case> cases = {
      {{"sender-token-01234567@mailroom:sender", "observer-token-0123456@audit:observer",
        "operator-token-012345@*:operator", "watching-operator-0123@mailroom:observer+operator"},
       "entry 4 of 4 is an observer of consumer group \"mailroom\", which entry 1, a sender "
       "credential, serves"},
      {{"observer-token-0123456@audit+mailroom:observer",
        "sender-token-01234567@mailroom+other:subscriber"},
       "entry 1 of 2 is an observer of consumer group \"mailroom\", which entry 2, a sender "
       "credential, serves"},
      {{"sender-token-01234567@*:sender", "observer-token-0123456@audit:observer"},
       "entry 2 of 2 is an observer of consumer group \"audit\", which entry 1, a sender "
       "credential of every group (`*`), serves"},
      {{"sender-token-01234567", "observer-token-0123456@audit:observer"},
       "which entry 1, an unscoped token (a sender of every group), serves"},
      {{"sender-token-01234567@*:sender", "observer-token-0123456@*:observer"},
       "entry 2 of 2 is an observer of every consumer group (`*`), which entry 1, a sender "
       "credential of every group (`*`), serves"},
      // Apart: accepted.
      {{"sender-token-01234567@mailroom:sender", "observer-token-0123456@audit:observer",
        "operator-token-012345@*:operator"},
       ""},
      {{"sender-token-01234567@mailroom:sender", "observer-token-0123456@*:observer"}, ""},
      {{"operator-token-012345@*:operator", "observer-token-0123456@mailroom:observer"}, ""},
  };
  for (const Case& c : cases) {
    auto creds = ParseCredentials(c.entries, kVar);
    ASSERT_TRUE(creds.ok()) << creds.status();
    absl::Status st = CheckObserversApart(*creds, kVar);
    if (c.error.empty()) {
      EXPECT_TRUE(st.ok()) << st;
      continue;
    }
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(st.message(), HasSubstr(absl::StrCat(kVar, ": ")));
    EXPECT_THAT(st.message(), HasSubstr(c.error));
    for (const auto& entry : c.entries) {
      EXPECT_THAT(st.message(), Not(HasSubstr(entry.substr(0, entry.find('@')))));
    }
  }
}

// What Subscribe refuses an observer: the groups any sender credential may use.
TEST(SenderServesTest, TheGroupsOfEverySenderCredential) {
  auto c = ParseCredentials({"sender-token-01234567@mailroom+other:sender",
                             "observer-token-0123456@*:observer",
                             "operator-token-012345@*:operator"},
                            kVar);
  ASSERT_TRUE(c.ok()) << c.status();
  Authenticator named(*c, false);
  EXPECT_TRUE(named.SenderServes("mailroom"));
  EXPECT_TRUE(named.SenderServes("other"));
  EXPECT_FALSE(named.SenderServes("audit"));
  auto all = ParseCredentials({"sender-token-01234567@*:sender"}, kVar);
  ASSERT_TRUE(all.ok());
  EXPECT_TRUE(Authenticator(*all, false).SenderServes("audit"));
  auto legacy = ParseCredentials({"sender-token-01234567"}, kVar);
  ASSERT_TRUE(legacy.ok());
  EXPECT_TRUE(Authenticator(*legacy, false).SenderServes("audit"));
  // Without bearer tokens every caller has full access, a sender's.
  EXPECT_TRUE(Authenticator({}, true).SenderServes("audit"));
}

TEST(ParseCredentialsTest, LegacyTokenHasEverything) {
  auto c = ParseCredentials({kSub}, kVar);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE((*c)[0].legacy);
  EXPECT_EQ((*c)[0].principal.roles, kAllRoles);
  EXPECT_TRUE((*c)[0].principal.all_groups);
}

TEST(ParseCredentialsTest, TheScopeFollowsTheLastAt) {
  auto c = ParseCredentials({"user@host-token-0123456789@mailroom:subscriber"}, kVar);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*c)[0].token, "user@host-token-0123456789");
  EXPECT_THAT((*c)[0].principal.groups, ElementsAre("mailroom"));
}

TEST(ParseCredentialsTest, ErrorsNameTheVariableAndEntryButNeverTheToken) {
  const std::string secret = "very-secret-token-0123456789";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"short@mailroom:subscriber", "at least 16 characters"},
      {"tiny", "at least 16 characters"},
      {secret + "@mailroom", "GROUPS:ROLE"},
      {secret + "@mailroom:subscriber:x", "GROUPS:ROLE"},
      {secret + "@Mail Room:subscriber", "group 1"},
      {secret + "@mailroom+:subscriber", "group 2"},
      {secret + "@*+audit:subscriber", "group 1"},
      {secret + "@:subscriber", "group 1"},
      {secret + "@mailroom:admin", "sender, observer or operator"},
      {secret + "@mailroom:", "sender, observer or operator"},
      {secret + "@audit:observer+sender", "exclude each other"},
      {secret + "@audit:subscriber+observer", "exclude each other"},
  };
  for (const auto& [entry, want] : cases) {
    auto c = ParseCredentials({"first-token-0123456789", entry}, kVar);
    ASSERT_FALSE(c.ok()) << entry;
    const std::string msg(c.status().message());
    EXPECT_THAT(msg, HasSubstr("MAILROOM_SUBSCRIBER_TOKENS: entry 2 of 2")) << entry;
    EXPECT_THAT(msg, HasSubstr(want)) << entry;
    EXPECT_THAT(msg, Not(HasSubstr("secret"))) << msg;
    EXPECT_THAT(msg, Not(HasSubstr("short"))) << msg;
    EXPECT_THAT(msg, Not(HasSubstr("tiny"))) << msg;
  }
  auto dup = ParseCredentials({secret + "@a:subscriber", secret + "@b:operator"}, kVar);
  ASSERT_FALSE(dup.ok());
  EXPECT_THAT(dup.status().message(), HasSubstr("same token as entry 1"));
  EXPECT_THAT(dup.status().message(), Not(HasSubstr("secret")));
}

class AuthenticatorTest : public ::testing::Test {
 protected:
  grpc::Status Call(const Authenticator& auth, const std::string& authorization, Principal* p) {
    grpc::ServerContext ctx;
    grpc::testing::ServerContextTestSpouse spouse(&ctx);
    if (!authorization.empty()) spouse.AddClientMetadata("authorization", authorization);
    return auth.Authenticate(ctx, p);
  }
};

TEST_F(AuthenticatorTest, ReturnsThePrincipalOfTheMatchingToken) {
  auto creds = ParseCredentials({std::string(kSub) + "@mailroom:subscriber",
                                 std::string(kOps) + "@audit+mailroom:operator"},
                                kVar);
  ASSERT_TRUE(creds.ok());
  Authenticator auth(*creds, /*allow_anonymous=*/false);
  Principal p;
  ASSERT_TRUE(Call(auth, std::string("Bearer ") + kSub, &p).ok());
  EXPECT_EQ(p.roles, kRoleSubscriber);
  EXPECT_THAT(p.groups, ElementsAre("mailroom"));
  ASSERT_TRUE(Call(auth, std::string("bearer ") + kOps, &p).ok());
  EXPECT_EQ(p.roles, kRoleOperator);
  EXPECT_THAT(p.groups, ElementsAre("audit", "mailroom"));

  const std::vector<std::string> bad_headers = {"", "Bearer wrong-token-0123456789", "Basic abc",
                                                std::string("Bearer ") + kSub + "x"};
  for (const std::string& bad : bad_headers) {
    grpc::Status st = Call(auth, bad, &p);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED) << bad;
    EXPECT_THAT(st.error_message(), Not(HasSubstr("wrong-token"))) << bad;
  }
}

TEST_F(AuthenticatorTest, AnonymousModeGrantsEverythingOnlyWithoutTokens) {
  Principal p;
  Authenticator anonymous({}, /*allow_anonymous=*/true);
  ASSERT_TRUE(Call(anonymous, "", &p).ok());
  EXPECT_EQ(p.roles, kAllRoles);
  EXPECT_TRUE(p.all_groups);
  Authenticator closed({}, /*allow_anonymous=*/false);
  EXPECT_EQ(Call(closed, "", &p).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  auto creds = ParseCredentials({kSub}, kVar);
  Authenticator tokens(*creds, /*allow_anonymous=*/true);  // tokens configured: required
  EXPECT_EQ(Call(tokens, "", &p).error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

TEST(CheckScopeTest, RoleAndGroup) {
  Principal sub{kRoleSubscriber, false, {"mailroom"}};
  EXPECT_TRUE(CheckScope(sub, kRoleSubscriber, "mailroom", "Subscribe").ok());
  EXPECT_TRUE(CheckScope(sub, kAllRoles, "mailroom", "GetUsage").ok());
  grpc::Status st = CheckScope(sub, kRoleSubscriber, "audit", "Subscribe");
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(st.error_message(), HasSubstr("\"audit\""));
  st = CheckScope(sub, kRoleOperator, "mailroom", "Requeue");
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(st.error_message(), HasSubstr("Requeue needs the operator role"));
  Principal ops{kRoleOperator, true, {}};
  EXPECT_TRUE(CheckScope(ops, kRoleOperator, "", "GetQueueStats").ok());
  EXPECT_EQ(CheckScope(ops, kRoleSubscriber, "mailroom", "Acknowledge").error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
}

// Subscription ids, holders and grant ids are bound to the credential.
TEST_F(AuthenticatorTest, IdsAreBoundToTheirCredential) {
  auto c = ParseCredentials({std::string(kSub) + "@mailroom:subscriber",
                             std::string(kOps) + "@mailroom:subscriber"},
                            kVar);
  ASSERT_TRUE(c.ok()) << c.status();
  Authenticator auth(*c, false);
  Principal a, b;
  ASSERT_TRUE(Call(auth, std::string("Bearer ") + kSub, &a).ok());
  ASSERT_TRUE(Call(auth, std::string("Bearer ") + kOps, &b).ok());
  const std::string id = NewSubscriptionId(a);
  EXPECT_THAT(id, ::testing::MatchesRegex("sub-[0-9a-f]{32}-[0-9a-f]{16}"));
  EXPECT_NE(NewSubscriptionId(a), id);
  EXPECT_TRUE(SubscriptionIsFor(id, a));
  EXPECT_FALSE(SubscriptionIsFor(id, b));
  EXPECT_FALSE(SubscriptionIsFor(id.substr(0, id.size() - 1) + "x", a));
  EXPECT_FALSE(SubscriptionIsFor("sub-1", a));
  EXPECT_TRUE(IsSubscriptionId(id));
  // The earlier, unbound form is no one's: neither another credential's nor its own.
  EXPECT_FALSE(IsSubscriptionId("sub-0123456789abcdef01"));
  EXPECT_FALSE(SubscriptionIsFor("sub-0123456789abcdef01", a));
  EXPECT_FALSE(SubscriptionIsFor("sub-0123456789abcdef01", b));

  EXPECT_NE(BoundHolder(a, "sender-1"), BoundHolder(b, "sender-1"));
  EXPECT_EQ(BoundHolder(a, "sender-1"), BoundHolder(a, "sender-1"));
  EXPECT_THAT(BoundHolder(a, "sender-1"), ::testing::StartsWith("sender-1~"));

  // Grant ids: a permutation per credential; consecutive ids do not look consecutive.
  EXPECT_EQ(SealGrantId(a, 0), 0u);
  std::set<uint64_t> seen;
  for (uint64_t id = 1; id <= 1000; ++id) {
    const uint64_t sealed = SealGrantId(a, id);
    EXPECT_EQ(OpenGrantId(a, sealed), id);
    EXPECT_NE(OpenGrantId(b, sealed), id);
    EXPECT_NE(SealGrantId(b, id), sealed);
    seen.insert(sealed);
    if (id > 1) {
      EXPECT_GT(sealed > SealGrantId(a, id - 1) ? sealed - SealGrantId(a, id - 1)
                                                : SealGrantId(a, id - 1) - sealed,
                1000u);
    }
  }
  EXPECT_EQ(seen.size(), 1000u);
}

}  // namespace
}  // namespace mailroom
