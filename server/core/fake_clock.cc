#include "server/core/fake_clock.h"

#include <algorithm>

namespace conv1d {

FakeClock::FakeClock(absl::Time start) : now_(start) {}

absl::Time FakeClock::Now() {
  absl::MutexLock lock(&time_mu_);
  return now_;
}

// Mutex::Await only re-evaluates conditions when the mutex is released, and
// fake time changes without touching the caller's mutex. So each waiter
// registers its mutex, and Advance() locks and unlocks every registered
// mutex after moving time, which makes absl re-check the waiters' conditions
// (including "now >= deadline"). Registration happens with `mu` released so
// the two lock orders (mu -> clock, clock -> mu) never meet; the waiter
// re-takes `mu` before it waits, so an Advance() that lands in between is
// seen either by the first evaluation of the condition or by the unlock.
bool FakeClock::AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond,
                                  absl::Time deadline)
    ABSL_NO_THREAD_SAFETY_ANALYSIS {
  if (cond.Eval()) return true;
  if (Now() >= deadline) return false;

  mu->Unlock();
  {
    absl::MutexLock lock(&waiters_mu_);
    waiters_.push_back(mu);
  }
  mu->Lock();

  struct CondOrDeadline {
    const absl::Condition* cond;
    FakeClock* clock;
    absl::Time deadline;
    bool operator()() const {
      return cond->Eval() || clock->Now() >= deadline;
    }
  } cond_or_deadline{&cond, this, deadline};
  mu->Await(absl::Condition(&cond_or_deadline));

  mu->Unlock();
  {
    absl::MutexLock lock(&waiters_mu_);
    auto it = std::find(waiters_.begin(), waiters_.end(), mu);
    waiters_.erase(it);
  }
  mu->Lock();
  return cond.Eval();
}

void FakeClock::Advance(absl::Duration d) {
  {
    absl::MutexLock lock(&time_mu_);
    if (d > absl::ZeroDuration()) now_ += d;
  }
  WakeWaiters();
}

void FakeClock::Set(absl::Time t) {
  {
    absl::MutexLock lock(&time_mu_);
    now_ = std::max(now_, t);
  }
  WakeWaiters();
}

void FakeClock::WakeWaiters() {
  // Holding waiters_mu_ keeps every registered mutex alive: a waiter cannot
  // deregister (and so its owner cannot be destroyed) until we are done.
  absl::MutexLock lock(&waiters_mu_);
  for (absl::Mutex* mu : waiters_) {
    mu->Lock();
    mu->Unlock();
  }
}

int FakeClock::num_waiters() const {
  absl::MutexLock lock(&waiters_mu_);
  return static_cast<int>(waiters_.size());
}

void FakeClock::AwaitWaiters(int n) const {
  absl::MutexLock lock(&waiters_mu_);
  auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(waiters_mu_) {
    return static_cast<int>(waiters_.size()) >= n;
  };
  waiters_mu_.Await(absl::Condition(&enough));
}

}  // namespace conv1d
