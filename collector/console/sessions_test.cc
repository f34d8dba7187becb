// ConsoleSessions against forged and fixed ids: only the ids it issued name a session, each
// sign-in gets a fresh id, and an ended or expired id stays dead.
#include "collector/console/sessions.h"

#include <string>

#include "absl/strings/ascii.h"
#include "common/testing/fake_clock.h"
#include "gtest/gtest.h"

namespace mailroom {
namespace {

Principal Operator() {
  Principal p;
  p.credential = "token 1";
  return p;
}

TEST(ConsoleSessionsIdTest, FindsNoSessionForAForgedOrAlteredId) {
  FakeClock clock(absl::FromUnixSeconds(1795425300));
  ConsoleSessions sessions(absl::Hours(8), 10, &clock);
  const std::string id = sessions.Begin(Operator());
  ASSERT_EQ(id.size(), 64u);
  EXPECT_FALSE(sessions.Find("").has_value());
  EXPECT_FALSE(sessions.Find(id.substr(0, 63)).has_value());
  EXPECT_FALSE(sessions.Find(id + "0").has_value());
  EXPECT_FALSE(sessions.Find(absl::AsciiStrToUpper(id) == id ? id + "x" : absl::AsciiStrToUpper(id))
                   .has_value());
  EXPECT_TRUE(sessions.Find(id).has_value());
}

TEST(ConsoleSessionsIdTest, GivesEachSignInAFreshIdAndCsrfToken) {
  FakeClock clock(absl::FromUnixSeconds(1795425300));
  ConsoleSessions sessions(absl::Hours(8), 10, &clock);
  const std::string a = sessions.Begin(Operator());
  const std::string b = sessions.Begin(Operator());
  EXPECT_NE(a, b);
  EXPECT_NE(sessions.Find(a)->csrf, sessions.Find(b)->csrf);
}

TEST(ConsoleSessionsIdTest, AnEndedOrExpiredIdStaysDead) {
  FakeClock clock(absl::FromUnixSeconds(1795425300));
  ConsoleSessions sessions(absl::Hours(8), 10, &clock);
  const std::string ended = sessions.Begin(Operator());
  const std::string expiring = sessions.Begin(Operator());
  sessions.End(ended);
  sessions.End("not an id");
  EXPECT_FALSE(sessions.Find(ended).has_value());
  clock.Advance(absl::Hours(8) + absl::Seconds(1));
  EXPECT_FALSE(sessions.Find(expiring).has_value());
  clock.Advance(-absl::Hours(1));
  EXPECT_FALSE(sessions.Find(expiring).has_value());
  EXPECT_EQ(sessions.size(), 0u);
}

}  // namespace
}  // namespace mailroom
