#include "common/http/curl_handle.h"

#include <future>
#include <map>
#include <set>

#include "gtest/gtest.h"

namespace mailroom {
namespace {

TEST(CurlHandlePoolTest, HandsOutAtMostSizeHandlesAndReusesThem) {
  CurlHandlePool pool(2);
  EXPECT_EQ(pool.size(), 2);
  std::set<CURL*> seen;
  {
    auto a = pool.Acquire();
    auto b = pool.Acquire();
    ASSERT_NE(a.get(), nullptr);
    ASSERT_NE(b.get(), nullptr);
    EXPECT_NE(a.get(), b.get());
    EXPECT_EQ(pool.in_use(), 2);
    seen = {a.get(), b.get()};
  }
  EXPECT_EQ(pool.in_use(), 0);
  // The same two handles come back (their connections with them), never a third, each
  // always at its own index.
  std::map<int, CURL*> by_index;
  for (int i = 0; i < 10; ++i) {
    auto l = pool.Acquire();
    auto other = pool.Acquire();
    for (const CurlHandlePool::Loan* loan : {&l, &other}) {
      EXPECT_EQ(seen.count(loan->get()), 1u);
      ASSERT_GE(loan->index(), 0);
      ASSERT_LT(loan->index(), 2);
      EXPECT_EQ(by_index.emplace(loan->index(), loan->get()).first->second, loan->get());
    }
    EXPECT_NE(l.index(), other.index());
  }
}

TEST(CurlHandlePoolTest, AcquireWaitsForARelease) {
  CurlHandlePool pool(1);
  auto held = std::make_unique<CurlHandlePool::Loan>(pool.Acquire());
  CURL* first = held->get();
  std::promise<void> started;
  auto waiter = std::async(std::launch::async, [&] {
    started.set_value();
    return pool.Acquire().get();
  });
  started.get_future().wait();
  // The waiter cannot finish while the only handle is on loan; releasing it lets it through.
  EXPECT_EQ(pool.in_use(), 1);
  held.reset();
  EXPECT_EQ(waiter.get(), first);
  EXPECT_EQ(pool.in_use(), 0);
}

TEST(CurlHandlePoolTest, AMovedLoanReturnsItsHandleOnce) {
  CurlHandlePool pool(1);
  {
    auto a = pool.Acquire();
    CurlHandlePool::Loan b(std::move(a));
    EXPECT_EQ(pool.in_use(), 1);
  }
  EXPECT_EQ(pool.in_use(), 0);
}

}  // namespace
}  // namespace mailroom
