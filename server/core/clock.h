// Clock: the source of time for the scheduler (queue delays, deadlines,
// shutdown bounds), injected so tests can use FakeClock and never sleep.
//
// The one waiting primitive, AwaitWithDeadline, waits on the caller's own
// absl::Mutex so a clock never adds a lock of its own to the caller's state;
// a fake clock wakes such waiters when its time moves past their deadline.
//
// Thread-safety: implementations are thread-safe; Now() and
// AwaitWithDeadline() may be called concurrently from any thread.
#ifndef CONV1D_SERVER_CORE_CLOCK_H_
#define CONV1D_SERVER_CORE_CLOCK_H_

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace conv1d {

class Clock {
 public:
  virtual ~Clock();

  virtual absl::Time Now() = 0;

  // Waits until `cond` is true or Now() >= deadline; returns cond's value
  // on return. `cond` must depend only on state guarded by `mu`.
  // REQUIRES: `mu` is held exclusively by the caller; it is held again on
  // return, but may have been released in between (as with Mutex::Await),
  // so the caller must re-check its state afterwards.
  virtual bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond,
                                 absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) = 0;

  // The process-wide wall clock (absl::Now, Mutex::AwaitWithDeadline).
  // Never destroyed.
  static Clock* Real();
};

}  // namespace conv1d

#endif  // CONV1D_SERVER_CORE_CLOCK_H_
