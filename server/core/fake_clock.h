// FakeClock: a Clock whose time moves only when a test tells it to.
//
// Used by scheduler tests (and any other test that times out) to make
// queue-delay, deadline and shutdown behaviour deterministic without real
// sleeps. Threads blocked in AwaitWithDeadline wake once Advance()/Set()
// moves the time to or past their deadline (or when their condition becomes
// true, as with any Mutex::Await). AwaitWaiters() lets a test wait until a
// thread is actually blocked on the clock before it moves time.
//
// Thread-safety: every method may be called from any thread.
// Lock order: the caller's mutex (passed to AwaitWithDeadline) may be held
// while the clock reads its time, never while it registers a waiter; Advance
// and Set must not be called with such a mutex held.
#ifndef CONV1D_SERVER_CORE_FAKE_CLOCK_H_
#define CONV1D_SERVER_CORE_FAKE_CLOCK_H_

#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/core/clock.h"

namespace conv1d {

class FakeClock final : public Clock {
 public:
  // Starts at a fixed, arbitrary instant (not the epoch, so "time minus a
  // delay" never underflows into the distant past by accident).
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1'700'000'000));

  absl::Time Now() override;
  bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond,
                         absl::Time deadline) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  // Moves time forward by `d` (REQUIRES: d >= 0) and wakes waiters whose
  // deadline has passed.
  void Advance(absl::Duration d);
  // Sets the time (never backwards: an earlier `t` is ignored) and wakes
  // waiters whose deadline has passed.
  void Set(absl::Time t);

  // Threads currently blocked in AwaitWithDeadline.
  int num_waiters() const;
  // Blocks (on real time, without a bound) until at least `n` threads are
  // blocked in AwaitWithDeadline.
  void AwaitWaiters(int n) const;

 private:
  void WakeWaiters();

  mutable absl::Mutex time_mu_;
  absl::Time now_ ABSL_GUARDED_BY(time_mu_);

  // The mutexes that threads are waiting on, one entry per waiting thread
  // (a mutex appears once per thread waiting on it).
  mutable absl::Mutex waiters_mu_ ABSL_ACQUIRED_BEFORE(time_mu_);
  std::vector<absl::Mutex*> waiters_ ABSL_GUARDED_BY(waiters_mu_);
};

}  // namespace conv1d

#endif  // CONV1D_SERVER_CORE_FAKE_CLOCK_H_
