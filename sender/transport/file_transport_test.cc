// The file transport against the real file system.
#include "sender/transport/file_transport.h"

#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/testing/fake_clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sender/transport/testing/transport_peers.h"

namespace mailroom {
namespace {

namespace fs = std::filesystem;
using transport_testing::Email;
using transport_testing::Slurp;
using transport_testing::TransportTest;

TEST_F(TransportTest, FileTransportWritesWholeMessages) {
  FileTransport t(dir_ + "/out", 1);
  fs::create_directories(dir_ + "/out");
  auto r = t.Send(Email("a@example.test", 1));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Slurp(r->provider_id), Email("a@example.test", 1).mime);
  EXPECT_TRUE(absl::EndsWith(r->provider_id, "id1example.test.eml"));
  for (const auto& e : fs::directory_iterator(dir_ + "/out")) {
    EXPECT_EQ(e.path().extension(), ".eml");  // no temporary files left
  }
}

TEST_F(TransportTest, FileTransportKeepsEveryCopyOfOneMessage) {
  // The clock stands still: every copy is named for the same millisecond.
  FakeClock clock(absl::FromUnixSeconds(1795425300));
  FileTransport t(dir_ + "/out", 1, &clock);
  fs::create_directories(dir_ + "/out");
  // The same message (a job tried again) many times.
  std::set<std::string> paths;
  for (int i = 0; i < 50; ++i) {
    auto r = t.Send(Email("a@example.test", 1));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(Slurp(r->provider_id), Email("a@example.test", 1).mime);
    paths.insert(r->provider_id);
  }
  EXPECT_EQ(paths.size(), 50u);
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir_ + "/out")) {
    EXPECT_EQ(e.path().extension(), ".eml");
    ++files;
  }
  EXPECT_EQ(files, 50u);
}

}  // namespace
}  // namespace mailroom
