// Scheduler behaviour with a recording backend and a fake clock: fusion,
// batch bounds, queue delay, fairness, drops, failures, shutdown, stats and
// observer calls. Nothing here sleeps to make time pass.
#include "server/core/scheduler.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "server/core/fake_clock.h"
#include "tests/core/scheduler_fixture.h"
#include "tests/core/scheduler_test_util.h"

namespace conv1d {
namespace {

using ::conv1d::testing::Completions;
using ::conv1d::testing::kBlockerTag;
using ::conv1d::testing::KeyWithDim;
using ::conv1d::testing::MakeTask;
using ::conv1d::testing::RecordedBatch;
using ::conv1d::testing::RecordingBackend;
using ::conv1d::testing::RecordingObserver;

std::vector<uint64_t> Tags(const RecordedBatch& b) {
  std::vector<uint64_t> tags;
  for (const auto& s : b.segments) tags.push_back(s.tag);
  return tags;
}

class SchedulerTest : public ::conv1d::testing::SchedulerFixture {};

// Closed-loop submitters over several lanes: each thread submits, waits
// for its answer, submits again. Arrivals race with lanes going to sleep and
// with other submitters holding the queue lock; a wake-up lost there would
// leave a task queued with every lane asleep, never answered.
TEST_F(SchedulerTest, ClosedLoopSubmittersAreAlwaysAnswered) {
  SchedulerOptions o;
  o.completion_threads = 2;
  Make(o, /*lanes=*/4);
  constexpr int kThreads = 32, kRounds = 300;
  std::atomic<int> stuck{0}, answered{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        auto task = MakeTask(static_cast<uint64_t>(t) * kRounds + r + 1,
                             KeyWithDim(8 * (1 + (t + r) % 2)), &done_);
        auto answer = std::make_shared<absl::Notification>();
        task->on_done = [answer](const absl::Status&, const TaskTimings&) {
          answer->Notify();
        };
        ASSERT_TRUE(sched_->Submit(&task).ok());
        if (!answer->WaitForNotificationWithTimeout(absl::Seconds(30))) {
          ++stuck;
          return;
        }
        ++answered;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(stuck.load(), 0);
  EXPECT_EQ(answered.load(), kThreads * kRounds);
  EXPECT_EQ(sched_->queued_requests(), 0);
  const SchedulerStats st = sched_->stats();
  EXPECT_EQ(st.submitted, kThreads * kRounds);
  EXPECT_EQ(st.completed, kThreads * kRounds);
}

TEST_F(SchedulerTest, FusesSameKeyFromManyThreadsWithRaggedSegments) {
  Make(SchedulerOptions{});
  BlockLane();
  const BatchKey key = KeyWithDim(64);
  constexpr int kThreads = 16, kPerThread = 4;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const uint64_t tag = t * kPerThread + i + 1;
        auto task = MakeTask(tag, key, &done_, /*batch=*/tag % 5 + 1,
                             /*seqlen=*/tag * 3 + 1);
        ASSERT_TRUE(sched_->Submit(&task).ok());
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(sched_->queued_requests(), kThreads * kPerThread);
  backend_->Unblock();
  ASSERT_TRUE(done_.AwaitCalls(kThreads * kPerThread + 1));

  const auto batches = backend_->batches();
  ASSERT_EQ(batches.size(), 2u);
  const RecordedBatch& fused = batches[1];
  EXPECT_EQ(fused.key, key);
  ASSERT_EQ(fused.segments.size(), size_t{kThreads * kPerThread});
  std::set<uint64_t> seen;
  for (const auto& seg : fused.segments) {
    EXPECT_EQ(seg.batch, static_cast<int64_t>(seg.tag % 5 + 1));
    EXPECT_EQ(seg.seqlen, static_cast<int64_t>(seg.tag * 3 + 1));
    seen.insert(seg.tag);
  }
  EXPECT_EQ(seen.size(), size_t{kThreads * kPerThread});
  for (uint64_t tag : seen) {
    const auto o = done_.Get(tag);
    EXPECT_EQ(o.calls, 1);
    EXPECT_TRUE(o.status.ok()) << o.status;
    EXPECT_EQ(o.timings.batch_requests, kThreads * kPerThread);
  }
  const SchedulerStats st = sched_->stats();
  EXPECT_EQ(st.submitted, kThreads * kPerThread + 1);
  EXPECT_EQ(st.completed, kThreads * kPerThread + 1);
  EXPECT_EQ(st.batches, 2);
  EXPECT_EQ(st.fused_batches, 1);
  EXPECT_EQ(st.max_batch_requests_seen, kThreads * kPerThread);
}

TEST_F(SchedulerTest, DifferentKeysAreNeverFused) {
  Make(SchedulerOptions{});
  BlockLane();
  const BatchKey keys[] = {KeyWithDim(16), KeyWithDim(32),
                           KeyWithDim(16, Op::kBackward)};
  for (uint64_t tag = 1; tag <= 12; ++tag) {
    Submit(MakeTask(tag, keys[tag % 3], &done_));
  }
  backend_->Unblock();
  ASSERT_TRUE(done_.AwaitCalls(13));
  const auto batches = backend_->batches();
  ASSERT_EQ(batches.size(), 4u);  // blocker + one per key
  for (size_t i = 1; i < batches.size(); ++i) {
    ASSERT_EQ(batches[i].segments.size(), 4u);
    for (uint64_t tag : Tags(batches[i])) {
      EXPECT_EQ(batches[i].key, keys[tag % 3]) << "tag " << tag;
    }
  }
}

TEST_F(SchedulerTest, MaxBatchRequestsBoundsBatchesInFifoOrder) {
  SchedulerOptions o;
  o.max_batch_requests = 4;
  Make(o);
  BlockLane();
  for (uint64_t tag = 1; tag <= 10; ++tag) {
    Submit(MakeTask(tag, KeyWithDim(8), &done_));
  }
  backend_->Unblock();
  ASSERT_TRUE(done_.AwaitCalls(11));
  const auto batches = backend_->batches();
  ASSERT_EQ(batches.size(), 4u);
  EXPECT_EQ(Tags(batches[1]), (std::vector<uint64_t>{1, 2, 3, 4}));
  EXPECT_EQ(Tags(batches[2]), (std::vector<uint64_t>{5, 6, 7, 8}));
  EXPECT_EQ(Tags(batches[3]), (std::vector<uint64_t>{9, 10}));
  EXPECT_EQ(sched_->stats().max_batch_requests_seen, 4);
}

// Records the threads that on_done calls run on. With wait_for > 0, each
// call then waits until that many threads are in on_done at once.
class OnDoneThreads {
 public:
  explicit OnDoneThreads(size_t wait_for = 0) : wait_for_(wait_for) {}

  // Makes `task`'s on_done record its thread first.
  void Wrap(Task* task) {
    task->on_done = [this, record = std::move(task->on_done)](
                        const absl::Status& st, const TaskTimings& t) mutable {
      {
        absl::MutexLock lock(&mu_);
        threads_.insert(std::this_thread::get_id());
        auto enough = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return threads_.size() >= wait_for_;
        };
        mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(30));
      }
      record(st, t);
    };
  }
  size_t count() const {
    absl::MutexLock lock(&mu_);
    return threads_.size();
  }

 private:
  const size_t wait_for_;
  mutable absl::Mutex mu_;
  std::set<std::thread::id> threads_ ABSL_GUARDED_BY(mu_);
};

TEST_F(SchedulerTest, LargeBatchOnDoneCallsAreSharedWithCompletionThreads) {
  SchedulerOptions o;
  o.max_batch_requests = 64;
  o.completion_threads = 3;
  Make(o);
  BlockLane();
  // Every on_done records its thread, then waits until four threads are in
  // on_done at once: only the lane plus three completion threads, each
  // holding one chunk, get there (a thread cannot take a second chunk while
  // it waits in its first).
  OnDoneThreads threads(4);
  constexpr int kTasks = 64;
  for (uint64_t tag = 1; tag <= kTasks; ++tag) {
    auto task = MakeTask(tag, KeyWithDim(8), &done_);
    threads.Wrap(task.get());
    Submit(std::move(task));
  }
  backend_->Unblock();
  ASSERT_TRUE(done_.AwaitCalls(kTasks + 1));
  sched_->Shutdown();
  // 64 tasks = 4 chunks of 16: the lane's and one per completion thread.
  EXPECT_EQ(threads.count(), 4u);
  for (uint64_t tag = 1; tag <= kTasks; ++tag) {
    EXPECT_EQ(done_.Get(tag).calls, 1) << tag;
    EXPECT_TRUE(done_.Get(tag).status.ok()) << tag;
    EXPECT_EQ(done_.Get(tag).timings.batch_requests, kTasks) << tag;
  }
}

// Batches of fewer than 2 * completion_chunk tasks, or no completion
// threads: every on_done runs on the lane. A smaller completion_chunk hands
// off smaller batches: 6 tasks with a chunk of 2 reach the completion threads.
TEST_F(SchedulerTest, SmallBatchesAndZeroCompletionThreadsFinishOnTheLane) {
  struct Case {
    int helpers, chunk, tasks;
    bool lane_only;
  };
  const int chunk = SchedulerOptions().completion_chunk;
  for (const Case& c : {Case{0, chunk, 64, true}, Case{4, chunk, 2 * chunk - 1, true},
                        Case{4, 2, 6, false}}) {
    SCOPED_TRACE(absl::StrCat(c.helpers, " helpers, chunk ", c.chunk, ", ", c.tasks, " tasks"));
    SchedulerOptions o;
    o.max_batch_requests = 64;
    o.completion_threads = c.helpers;
    o.completion_chunk = c.chunk;
    Make(o);
    Completions done;
    BlockLane(&done);
    OnDoneThreads threads;
    for (int tag = 1; tag <= c.tasks; ++tag) {
      auto task = MakeTask(tag, KeyWithDim(8), &done);
      threads.Wrap(task.get());
      Submit(std::move(task));
    }
    backend_->Unblock();
    ASSERT_TRUE(done.AwaitCalls(c.tasks + 1));
    sched_->Shutdown();
    if (c.lane_only) {
      EXPECT_EQ(threads.count(), 1u);
    } else {
      EXPECT_GT(threads.count(), 1u);
    }
    for (int tag = 1; tag <= c.tasks; ++tag) EXPECT_EQ(done.Get(tag).calls, 1) << tag;
    sched_.reset();
  }
}

// Batch sizes that do not divide evenly into chunks, with many completion
// threads: every on_done is still called exactly once.
TEST_F(SchedulerTest, UnevenBatchesAreSharedOutWithoutLosingOrRepeatingTasks) {
  for (int tasks : {16, 17, 41, 89, 127}) {
    SCOPED_TRACE(tasks);
    SchedulerOptions o;
    o.max_batch_requests = 128;
    o.completion_threads = 10;
    Make(o);
    Completions done;
    BlockLane(&done);
    for (int tag = 1; tag <= tasks; ++tag) Submit(MakeTask(tag, KeyWithDim(8), &done));
    backend_->Unblock();
    ASSERT_TRUE(done.AwaitCalls(tasks + 1));
    sched_->Shutdown();
    for (int tag = 1; tag <= tasks; ++tag) {
      EXPECT_EQ(done.Get(tag).calls, 1) << tag;
      EXPECT_TRUE(done.Get(tag).status.ok()) << tag;
      EXPECT_EQ(done.Get(tag).timings.batch_requests, tasks) << tag;
    }
    EXPECT_EQ(done.total_calls(), tasks + 1);
    sched_.reset();
  }
}

TEST_F(SchedulerTest, MaxBatchRequestsOfOneDisablesFusion) {
  SchedulerOptions o;
  o.max_batch_requests = 1;
  Make(o);
  BlockLane();
  for (uint64_t tag = 1; tag <= 3; ++tag) {
    Submit(MakeTask(tag, KeyWithDim(8), &done_));
  }
  backend_->Unblock();
  ASSERT_TRUE(done_.AwaitCalls(4));
  EXPECT_EQ(backend_->batches().size(), 4u);
  EXPECT_EQ(sched_->stats().fused_batches, 0);
}

TEST_F(SchedulerTest, MaxBatchBytesBoundsBatchesAndOversizedTaskRunsAlone) {
  SchedulerOptions o;
  o.max_batch_bytes = 1000;
  Make(o);
  BlockLane();
  const BatchKey key = KeyWithDim(8);
  // 300+300+300 fit; the 4th would make 1200. Then an oversized task, which
  // must neither be skipped nor joined.
  for (uint64_t tag = 1; tag <= 4; ++tag) {
    Submit(MakeTask(tag, key, &done_, 1, 16, /*bytes=*/300));
  }
  Submit(MakeTask(5, key, &done_, 1, 16, /*bytes=*/5000));
  Submit(MakeTask(6, key, &done_, 1, 16, /*bytes=*/300));
  Submit(MakeTask(7, key, &done_, 1, 16, /*bytes=*/700));
  backend_->Unblock();
  ASSERT_TRUE(done_.AwaitCalls(8));
  const auto batches = backend_->batches();
  ASSERT_EQ(batches.size(), 5u);
  EXPECT_EQ(Tags(batches[1]), (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(Tags(batches[2]), (std::vector<uint64_t>{4}));  // 4+5 = 5300
  EXPECT_EQ(Tags(batches[3]), (std::vector<uint64_t>{5}));
  EXPECT_EQ(Tags(batches[4]), (std::vector<uint64_t>{6, 7}));  // exactly 1000
  for (uint64_t tag = 1; tag <= 7; ++tag) {
    EXPECT_TRUE(done_.Get(tag).status.ok());
  }
}

TEST_F(SchedulerTest, OversizedSingleTaskRunsWhenQueueIsOtherwiseEmpty) {
  SchedulerOptions o;
  o.max_batch_bytes = 10;
  Make(o);
  Submit(MakeTask(1, KeyWithDim(8), &done_, 1, 16, /*bytes=*/1 << 20));
  ASSERT_TRUE(done_.AwaitCalls(1));
  EXPECT_TRUE(done_.Get(1).status.ok());
  EXPECT_EQ(backend_->batches().size(), 1u);
}

TEST_F(SchedulerTest, WorkConservingWithZeroDelayNeedsNoTimeToPass) {
  Make(SchedulerOptions{});
  // The fake clock never moves: a zero delay must not wait on it.
  for (uint64_t tag = 1; tag <= 3; ++tag) {
    Submit(MakeTask(tag, KeyWithDim(8), &done_));
    ASSERT_TRUE(done_.AwaitCalls(tag));
  }
  EXPECT_EQ(backend_->batches().size(), 3u);
  EXPECT_EQ(clock_.num_waiters(), 0);
}

TEST_F(SchedulerTest, QueueDelayWaitsUntilTheOldestTaskHasWaitedThatLong) {
  SchedulerOptions o;
  o.max_queue_delay_us = 1000;
  o.max_batch_requests = 4;
  Make(o);
  const BatchKey key = KeyWithDim(8);
  Submit(MakeTask(1, key, &done_));
  Submit(MakeTask(2, key, &done_));
  clock_.AwaitWaiters(1);  // the lane is waiting for the batch to fill
  EXPECT_TRUE(backend_->batches().empty());
  clock_.Advance(absl::Microseconds(999));
  // Had the lane left early, this task would miss the batch.
  Submit(MakeTask(3, key, &done_));
  EXPECT_TRUE(backend_->batches().empty());
  EXPECT_EQ(done_.total_calls(), 0);
  clock_.Advance(absl::Microseconds(1));
  ASSERT_TRUE(done_.AwaitCalls(3));
  const auto batches = backend_->batches();
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_EQ(Tags(batches[0]), (std::vector<uint64_t>{1, 2, 3}));
}

TEST_F(SchedulerTest, QueueDelayEndsEarlyWhenTheBatchIsFull) {
  SchedulerOptions o;
  o.max_queue_delay_us = 1'000'000;
  o.max_batch_requests = 4;
  Make(o);
  const BatchKey key = KeyWithDim(8);
  Submit(MakeTask(1, key, &done_));
  clock_.AwaitWaiters(1);
  for (uint64_t tag = 2; tag <= 5; ++tag) Submit(MakeTask(tag, key, &done_));
  ASSERT_TRUE(done_.AwaitCalls(4));  // no time has passed
  EXPECT_EQ(Tags(backend_->batches()[0]), (std::vector<uint64_t>{1, 2, 3, 4}));
  // Task 5 now heads the queue and waits its own full delay.
  clock_.AwaitWaiters(1);
  EXPECT_EQ(backend_->batches().size(), 1u);
  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(done_.AwaitCalls(5));
  EXPECT_EQ(Tags(backend_->batches()[1]), (std::vector<uint64_t>{5}));
}

TEST_F(SchedulerTest, QueueDelayEndsEarlyWhenBytesAreFull) {
  SchedulerOptions o;
  o.max_queue_delay_us = 1'000'000;
  o.max_batch_bytes = 1000;
  Make(o);
  const BatchKey key = KeyWithDim(8);
  Submit(MakeTask(1, key, &done_, 1, 16, 600));
  clock_.AwaitWaiters(1);
  Submit(MakeTask(2, key, &done_, 1, 16, 600));
  ASSERT_TRUE(done_.AwaitCalls(1));
  EXPECT_EQ(Tags(backend_->batches()[0]), (std::vector<uint64_t>{1}));
}

TEST_F(SchedulerTest, OtherLanesServeOtherKeysWhileOneWaitsForItsBatch) {
  SchedulerOptions o;
  o.max_queue_delay_us = 1000;
  o.max_batch_requests = 2;
  Make(o, /*lanes=*/2);
  Submit(MakeTask(1, KeyWithDim(8), &done_));
  clock_.AwaitWaiters(1);
  Submit(MakeTask(2, KeyWithDim(16), &done_));
  Submit(MakeTask(3, KeyWithDim(16), &done_));
  ASSERT_TRUE(done_.AwaitCalls(2));
  EXPECT_EQ(done_.Get(1).calls, 0);
  EXPECT_TRUE(done_.Get(2).status.ok());
  clock_.Advance(absl::Milliseconds(1));
  ASSERT_TRUE(done_.AwaitCalls(3));
  EXPECT_TRUE(done_.Get(1).status.ok());
}

TEST_F(SchedulerTest, FairnessTakesTheKeyWithTheOldestHead) {
  SchedulerOptions o;
  o.max_batch_requests = 1;
  Make(o);
  BlockLane();
  const BatchKey a = KeyWithDim(8), b = KeyWithDim(16), c = KeyWithDim(24);
  Submit(MakeTask(1, a, &done_));
  Submit(MakeTask(2, b, &done_));
  Submit(MakeTask(3, a, &done_));
  Submit(MakeTask(4, c, &done_));
  Submit(MakeTask(5, b, &done_));
  Submit(MakeTask(6, a, &done_));
  backend_->Unblock();
  ASSERT_TRUE(done_.AwaitCalls(7));
  EXPECT_EQ(done_.Order(),
            (std::vector<uint64_t>{kBlockerTag, 1, 2, 3, 4, 5, 6}));
}

TEST_F(SchedulerTest, FairnessWithFusionServesKeysByOldestHead) {
  Make(SchedulerOptions{});
  BlockLane();
  const BatchKey a = KeyWithDim(8), b = KeyWithDim(16), c = KeyWithDim(24);
  Submit(MakeTask(1, b, &done_));
  Submit(MakeTask(2, c, &done_));
  Submit(MakeTask(3, a, &done_));
  Submit(MakeTask(4, b, &done_));
  Submit(MakeTask(5, a, &done_));
  backend_->Unblock();
  ASSERT_TRUE(done_.AwaitCalls(6));
  const auto batches = backend_->batches();
  ASSERT_EQ(batches.size(), 4u);
  EXPECT_EQ(Tags(batches[1]), (std::vector<uint64_t>{1, 4}));
  EXPECT_EQ(Tags(batches[2]), (std::vector<uint64_t>{2}));
  EXPECT_EQ(Tags(batches[3]), (std::vector<uint64_t>{3, 5}));
}

TEST_F(SchedulerTest, FullQueueRejectsAndLeavesOwnershipWithTheCaller) {
  SchedulerOptions o;
  o.max_queued_requests = 2;
  Make(o);
  BlockLane();  // the blocker is no longer queued
  Submit(MakeTask(1, KeyWithDim(8), &done_));
  Submit(MakeTask(2, KeyWithDim(16), &done_));
  auto task = MakeTask(3, KeyWithDim(8), &done_);
  Task* raw = task.get();
  absl::Status s = sched_->Submit(&task);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("max_queued_requests"), absl::string_view::npos)
      << s;
  EXPECT_NE(s.message().find("retry"), absl::string_view::npos) << s;
  EXPECT_EQ(task.get(), raw);
  EXPECT_EQ(sched_->stats().rejected_queue_full, 1);
  EXPECT_EQ(observer_.rejected(RejectReason::kQueueFull), 1);
  backend_->Unblock();
  ASSERT_TRUE(done_.AwaitCalls(3));
  EXPECT_EQ(done_.Get(3).calls, 0);
  // The caller still owns it and may submit it again once there is room.
  ASSERT_TRUE(sched_->Submit(&task).ok());
  ASSERT_TRUE(done_.AwaitCalls(4));
  EXPECT_TRUE(done_.Get(3).status.ok());
}

TEST_F(SchedulerTest, DeadlinePassedWhileQueuedIsDroppedWithoutCompute) {
  Make(SchedulerOptions{});
  BlockLane();
  auto expiring = MakeTask(1, KeyWithDim(8), &done_);
  expiring->deadline = clock_.Now() + absl::Milliseconds(10);
  Submit(std::move(expiring));
  auto lasting = MakeTask(2, KeyWithDim(8), &done_);
  lasting->deadline = clock_.Now() + absl::Milliseconds(30);
  Submit(std::move(lasting));
  clock_.Advance(absl::Milliseconds(20));
  backend_->Unblock();
  ASSERT_TRUE(done_.AwaitCalls(3));
  const auto o = done_.Get(1);
  EXPECT_EQ(o.calls, 1);
  EXPECT_EQ(o.status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(o.status.message().find("deadline passed while queued"),
            absl::string_view::npos)
      << o.status;
  EXPECT_TRUE(done_.Get(2).status.ok());
  const auto batches = backend_->batches();
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_EQ(Tags(batches[1]), (std::vector<uint64_t>{2}));
  EXPECT_EQ(sched_->stats().dropped_deadline, 1);
  EXPECT_EQ(observer_.rejected(RejectReason::kDeadline), 1);
}

TEST_F(SchedulerTest, CancelledWhileQueuedIsDroppedWithoutCompute) {
  Make(SchedulerOptions{});
  BlockLane();
  std::atomic<bool> gone{false};
  auto task = MakeTask(1, KeyWithDim(8), &done_);
  task->cancelled = [&gone] { return gone.load(); };
  Submit(std::move(task));
  Submit(MakeTask(2, KeyWithDim(8), &done_));
  gone = true;
  backend_->Unblock();
  ASSERT_TRUE(done_.AwaitCalls(3));
  EXPECT_EQ(done_.Get(1).status.code(), absl::StatusCode::kCancelled);
  EXPECT_TRUE(done_.Get(2).status.ok());
  const auto batches = backend_->batches();
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_EQ(Tags(batches[1]), (std::vector<uint64_t>{2}));
  EXPECT_EQ(sched_->stats().dropped_cancelled, 1);
  EXPECT_EQ(observer_.rejected(RejectReason::kCancelled), 1);
}

TEST_F(SchedulerTest, BackendFailureFailsEveryTaskOfThatBatchOnly) {
  Make(SchedulerOptions{});
  BlockLane();
  for (uint64_t tag = 1; tag <= 3; ++tag) {
    Submit(MakeTask(tag, KeyWithDim(8), &done_));
  }
  backend_->FailWith(absl::InternalError("device fell over"));
  backend_->Unblock();
  ASSERT_TRUE(done_.AwaitCalls(4));
  for (uint64_t tag : {kBlockerTag, uint64_t{1}, uint64_t{2}, uint64_t{3}}) {
    const auto o = done_.Get(tag);
    EXPECT_EQ(o.calls, 1);
    EXPECT_EQ(o.status, absl::InternalError("device fell over"));
  }
  EXPECT_EQ(sched_->stats().failed, 4);
  backend_->FailWith(absl::OkStatus());
  Submit(MakeTask(4, KeyWithDim(8), &done_));
  ASSERT_TRUE(done_.AwaitCalls(5));
  EXPECT_TRUE(done_.Get(4).status.ok());
  EXPECT_EQ(sched_->stats().completed, 1);
}

TEST_F(SchedulerTest, SubmitRejectsNullTask) {
  Make(SchedulerOptions{});
  std::unique_ptr<Task> none;
  EXPECT_EQ(sched_->Submit(&none).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(sched_->Submit(nullptr).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace conv1d
