// SchedulerFixture: a gtest fixture for the scheduler tests, owning a
// RecordingBackend, a FakeClock, a RecordingObserver and the Scheduler
// under test, with helpers to submit tasks and to hold the lane busy.
// Used from the test thread only.
#ifndef CONV1D_TESTS_CORE_SCHEDULER_FIXTURE_H_
#define CONV1D_TESTS_CORE_SCHEDULER_FIXTURE_H_

#include <cstdint>
#include <memory>
#include <utility>

#include "gtest/gtest.h"
#include "server/core/fake_clock.h"
#include "server/core/scheduler.h"
#include "tests/core/scheduler_test_util.h"

namespace conv1d::testing {

// Tag of the task BlockLane submits.
inline constexpr uint64_t kBlockerTag = 1'000'000;

class SchedulerFixture : public ::testing::Test {
 protected:
  // A scheduler over a fresh backend of `lanes` lanes; null (and a test
  // failure) when Create refuses the options.
  Scheduler* Make(const SchedulerOptions& options, int lanes = 1) {
    backend_ = std::make_unique<RecordingBackend>(lanes);
    auto s = Scheduler::Create(options, backend_.get(), &clock_, &observer_);
    EXPECT_TRUE(s.ok()) << s.status();
    sched_ = s.ok() ? std::move(s).value() : nullptr;
    return sched_.get();
  }

  void TearDown() override {
    if (backend_) backend_->Unblock();
    sched_.reset();
  }

  void Submit(std::unique_ptr<Task> task) {
    absl::Status s = sched_->Submit(&task);
    ASSERT_TRUE(s.ok()) << s;
    ASSERT_EQ(task, nullptr);
  }

  // Occupies the (single) lane with a batch that waits in the backend, so
  // the test can queue tasks and then release them all at once. The blocker
  // reports to `done` (default done_).
  void BlockLane(Completions* done = nullptr) {
    backend_->Block();
    Submit(MakeTask(kBlockerTag, KeyWithDim(999, Op::kUpdate), done ? done : &done_));
    ASSERT_TRUE(backend_->AwaitEntered(1));
  }

  FakeClock clock_;
  RecordingObserver observer_;
  Completions done_;
  std::unique_ptr<RecordingBackend> backend_;
  std::unique_ptr<Scheduler> sched_;
};

}  // namespace conv1d::testing

#endif  // CONV1D_TESTS_CORE_SCHEDULER_FIXTURE_H_
