// FakeClock and the real Clock: waiting on a caller's mutex until a
// condition holds or the clock passes a deadline.
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "server/core/clock.h"
#include "server/core/fake_clock.h"

namespace conv1d {
namespace {

TEST(FakeClockTest, TimeMovesOnlyWhenTold) {
  FakeClock clock;
  const absl::Time t0 = clock.Now();
  EXPECT_EQ(clock.Now(), t0);
  clock.Advance(absl::Milliseconds(3));
  EXPECT_EQ(clock.Now(), t0 + absl::Milliseconds(3));
  clock.Set(t0);  // never backwards
  EXPECT_EQ(clock.Now(), t0 + absl::Milliseconds(3));
  clock.Set(t0 + absl::Seconds(1));
  EXPECT_EQ(clock.Now(), t0 + absl::Seconds(1));
  clock.Advance(-absl::Seconds(1));  // ignored
  EXPECT_EQ(clock.Now(), t0 + absl::Seconds(1));
}

TEST(FakeClockTest, ReturnsAtOnceWhenConditionHoldsOrDeadlinePassed) {
  FakeClock clock;
  absl::Mutex mu;
  bool flag = true;
  absl::MutexLock lock(&mu);
  EXPECT_TRUE(clock.AwaitWithDeadline(&mu, absl::Condition(&flag),
                                      absl::InfiniteFuture()));
  flag = false;
  EXPECT_FALSE(clock.AwaitWithDeadline(&mu, absl::Condition(&flag),
                                       clock.Now()));
  EXPECT_EQ(clock.num_waiters(), 0);
}

TEST(FakeClockTest, WaiterWakesOnlyOnceTimeReachesItsDeadline) {
  FakeClock clock;
  absl::Mutex mu;
  bool flag = false;
  bool returned = false;
  bool result = true;
  const absl::Time deadline = clock.Now() + absl::Milliseconds(10);
  std::thread waiter([&] {
    absl::MutexLock lock(&mu);
    result = clock.AwaitWithDeadline(&mu, absl::Condition(&flag), deadline);
    returned = true;
  });
  clock.AwaitWaiters(1);
  clock.Advance(absl::Milliseconds(9));
  {
    // The waiter has had its condition re-evaluated by the advance above;
    // it must still be waiting.
    absl::MutexLock lock(&mu);
    EXPECT_FALSE(returned);
  }
  EXPECT_EQ(clock.num_waiters(), 1);
  clock.Advance(absl::Milliseconds(1));
  waiter.join();
  EXPECT_TRUE(returned);
  EXPECT_FALSE(result);
  EXPECT_EQ(clock.num_waiters(), 0);
}

TEST(FakeClockTest, WaiterWakesWhenConditionBecomesTrue) {
  FakeClock clock;
  absl::Mutex mu;
  bool flag = false;
  bool result = false;
  std::thread waiter([&] {
    absl::MutexLock lock(&mu);
    result = clock.AwaitWithDeadline(&mu, absl::Condition(&flag),
                                     absl::InfiniteFuture());
  });
  clock.AwaitWaiters(1);
  {
    absl::MutexLock lock(&mu);
    flag = true;
  }
  waiter.join();
  EXPECT_TRUE(result);
}

TEST(FakeClockTest, ManyWaitersOnSeveralMutexesWakeByDeadline) {
  FakeClock clock;
  constexpr int kWaiters = 8;
  absl::Mutex mus[2];
  bool never = false;
  const absl::Time t0 = clock.Now();
  std::vector<std::thread> early, late;
  for (int i = 0; i < kWaiters; ++i) {
    auto& group = i < kWaiters / 2 ? early : late;
    const absl::Time deadline = t0 + absl::Seconds(i < kWaiters / 2 ? 1 : 2);
    group.emplace_back([&, i, deadline] {
      absl::Mutex& mu = mus[i % 2];
      absl::MutexLock lock(&mu);
      EXPECT_FALSE(clock.AwaitWithDeadline(&mu, absl::Condition(&never),
                                           deadline));
      EXPECT_GE(clock.Now(), deadline);
    });
  }
  clock.AwaitWaiters(kWaiters);
  clock.Advance(absl::Seconds(1));
  for (auto& t : early) t.join();
  EXPECT_EQ(clock.num_waiters(), kWaiters / 2);
  clock.Advance(absl::Seconds(1));
  for (auto& t : late) t.join();
  EXPECT_EQ(clock.num_waiters(), 0);
}

TEST(RealClockTest, AwaitWithDeadlineTimesOutOnWallTime) {
  Clock* clock = Clock::Real();
  absl::Mutex mu;
  bool flag = false;
  absl::MutexLock lock(&mu);
  const absl::Time start = clock->Now();
  EXPECT_FALSE(clock->AwaitWithDeadline(&mu, absl::Condition(&flag),
                                        start + absl::Milliseconds(5)));
  EXPECT_GE(clock->Now() - start, absl::Milliseconds(5));
  flag = true;
  EXPECT_TRUE(clock->AwaitWithDeadline(&mu, absl::Condition(&flag),
                                       absl::InfiniteFuture()));
}

}  // namespace
}  // namespace conv1d
