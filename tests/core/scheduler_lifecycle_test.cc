// Scheduler option validation, shutdown and draining, stats, timings and
// observer calls, and a multi-threaded stress run checking that every task
// completes exactly once.
#include <atomic>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "server/core/fake_clock.h"
#include "server/core/scheduler.h"
#include "tests/common/test_seed.h"
#include "tests/core/scheduler_fixture.h"
#include "tests/core/scheduler_test_util.h"

namespace conv1d {
namespace {

using ::conv1d::testing::Completions;
using ::conv1d::testing::kBlockerTag;
using ::conv1d::testing::KeyWithDim;
using ::conv1d::testing::MakeTask;
using ::conv1d::testing::RecordingBackend;
using ::conv1d::testing::RecordingObserver;

TEST(SchedulerCreateTest, RejectsEachInvalidOptionByName) {
  RecordingBackend backend;
  FakeClock clock;
  struct Case {
    const char* field;
    SchedulerOptions options;
  };
  std::vector<Case> cases;
  auto add = [&](const char* field, auto mutate) {
    SchedulerOptions o;
    mutate(o);
    cases.push_back({field, o});
  };
  add("max_batch_bytes", [](SchedulerOptions& o) { o.max_batch_bytes = 0; });
  add("max_batch_requests", [](SchedulerOptions& o) { o.max_batch_requests = 0; });
  add("max_batch_requests",
      [](SchedulerOptions& o) { o.max_batch_requests = 1 << 20; });
  add("max_queue_delay_us", [](SchedulerOptions& o) { o.max_queue_delay_us = -1; });
  add("max_queue_delay_us",
      [](SchedulerOptions& o) { o.max_queue_delay_us = 60'000'000; });
  add("max_queued_requests",
      [](SchedulerOptions& o) { o.max_queued_requests = 0; });
  add("completion_threads", [](SchedulerOptions& o) { o.completion_threads = -1; });
  add("completion_threads", [](SchedulerOptions& o) { o.completion_threads = 65; });
  add("completion_chunk", [](SchedulerOptions& o) { o.completion_chunk = 0; });
  add("completion_chunk", [](SchedulerOptions& o) { o.completion_chunk = 4097; });
  for (const Case& c : cases) {
    auto s = Scheduler::Create(c.options, &backend, &clock, nullptr);
    ASSERT_FALSE(s.ok()) << c.field;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find(c.field), absl::string_view::npos)
        << s.status();
  }
  EXPECT_FALSE(Scheduler::Create({}, nullptr, &clock, nullptr).ok());
  EXPECT_FALSE(Scheduler::Create({}, &backend, nullptr, nullptr).ok());
  RecordingBackend no_lanes(0);
  EXPECT_EQ(Scheduler::Create({}, &no_lanes, &clock, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  SchedulerOptions edge;
  edge.max_batch_requests = 1;
  edge.max_batch_bytes = 1;
  edge.max_queue_delay_us = 10'000'000;
  edge.max_queued_requests = 1;
  EXPECT_TRUE(Scheduler::Create(edge, &backend, &clock, nullptr).ok());
}

TEST(SchedulerCreateTest, RunsWithoutAnObserver) {
  RecordingBackend backend(2);
  FakeClock clock;
  Completions done;
  SchedulerOptions o;
  o.max_queued_requests = 2;
  auto s = Scheduler::Create(o, &backend, &clock, /*observer=*/nullptr);
  ASSERT_TRUE(s.ok());
  Scheduler& sched = **s;
  backend.Block();
  auto first = MakeTask(1, KeyWithDim(8), &done);
  ASSERT_TRUE(sched.Submit(&first).ok());
  ASSERT_TRUE(backend.AwaitEntered(1));
  auto second = MakeTask(2, KeyWithDim(16), &done);
  ASSERT_TRUE(sched.Submit(&second).ok());
  ASSERT_TRUE(backend.AwaitEntered(2));
  auto cancelled = MakeTask(3, KeyWithDim(8), &done);
  cancelled->cancelled = [] { return true; };
  ASSERT_TRUE(sched.Submit(&cancelled).ok());
  auto kept = MakeTask(4, KeyWithDim(8), &done);
  ASSERT_TRUE(sched.Submit(&kept).ok());
  auto rejected = MakeTask(5, KeyWithDim(8), &done);
  EXPECT_EQ(sched.Submit(&rejected).code(),
            absl::StatusCode::kResourceExhausted);
  backend.Unblock();
  sched.Shutdown();
  EXPECT_EQ(done.total_calls(), 4);
  EXPECT_EQ(done.Get(3).status.code(), absl::StatusCode::kCancelled);
  EXPECT_TRUE(done.Get(4).status.ok());
  EXPECT_EQ(sched.Submit(&rejected).code(), absl::StatusCode::kUnavailable);
}

class SchedulerLifecycleTest : public ::conv1d::testing::SchedulerFixture {};

TEST_F(SchedulerLifecycleTest, ShutdownDrainsQueuedTasksAndThenRejects) {
  Make(SchedulerOptions{});
  BlockLane();
  for (uint64_t tag = 1; tag <= 3; ++tag) {
    Submit(MakeTask(tag, KeyWithDim(8), &done_));
  }
  std::thread stopper([this] { sched_->Shutdown(); });
  clock_.AwaitWaiters(1);  // Shutdown is waiting for the queue to drain
  auto late = MakeTask(4, KeyWithDim(8), &done_);
  absl::Status s = sched_->Submit(&late);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(late, nullptr);
  EXPECT_EQ(observer_.rejected(RejectReason::kDraining), 1);
  EXPECT_EQ(done_.total_calls(), 0);
  backend_->Unblock();
  stopper.join();
  EXPECT_EQ(done_.total_calls(), 4);
  for (uint64_t tag : {kBlockerTag, uint64_t{1}, uint64_t{2}, uint64_t{3}}) {
    EXPECT_EQ(done_.Get(tag).calls, 1);
    EXPECT_TRUE(done_.Get(tag).status.ok());
  }
  EXPECT_EQ(sched_->queued_requests(), 0);
  sched_->Shutdown();  // idempotent
  EXPECT_EQ(sched_->Submit(&late).code(), absl::StatusCode::kUnavailable);
}

TEST_F(SchedulerLifecycleTest, ShutdownTimeoutFailsTasksStillQueued) {
  Make(SchedulerOptions{});
  BlockLane();
  for (uint64_t tag = 1; tag <= 3; ++tag) {
    Submit(MakeTask(tag, KeyWithDim(8), &done_));
  }
  std::thread stopper([this] { sched_->Shutdown(absl::Seconds(5)); });
  clock_.AwaitWaiters(1);
  clock_.Advance(absl::Seconds(5));
  // The queued tasks fail while the running batch is still in the backend.
  ASSERT_TRUE(done_.AwaitCalls(3));
  for (uint64_t tag = 1; tag <= 3; ++tag) {
    const auto o = done_.Get(tag);
    EXPECT_EQ(o.calls, 1);
    EXPECT_EQ(o.status.code(), absl::StatusCode::kUnavailable);
  }
  EXPECT_EQ(done_.Get(kBlockerTag).calls, 0);
  backend_->Unblock();
  stopper.join();
  EXPECT_TRUE(done_.Get(kBlockerTag).status.ok());
  const SchedulerStats st = sched_->stats();
  EXPECT_EQ(st.dropped_shutdown, 3);
  EXPECT_EQ(st.completed, 1);
  EXPECT_EQ(observer_.rejected(RejectReason::kDraining), 3);
  EXPECT_EQ(backend_->batches().size(), 1u);
}

TEST_F(SchedulerLifecycleTest, ShutdownWakesALaneWaitingForItsBatchToFill) {
  SchedulerOptions o;
  o.max_queue_delay_us = 10'000'000;
  Make(o);
  Submit(MakeTask(1, KeyWithDim(8), &done_));
  clock_.AwaitWaiters(1);
  sched_->Shutdown();  // no time passes: draining must not wait the delay
  EXPECT_EQ(done_.Get(1).calls, 1);
  EXPECT_TRUE(done_.Get(1).status.ok());
}

TEST_F(SchedulerLifecycleTest, DestructorDrainsLikeShutdown) {
  Make(SchedulerOptions{}, /*lanes=*/3);
  for (uint64_t tag = 1; tag <= 50; ++tag) {
    Submit(MakeTask(tag, KeyWithDim(8 * (tag % 4 + 1)), &done_));
  }
  sched_.reset();
  EXPECT_EQ(done_.total_calls(), 50);
  for (uint64_t tag = 1; tag <= 50; ++tag) EXPECT_EQ(done_.Get(tag).calls, 1);
}

TEST_F(SchedulerLifecycleTest, TimingsStatsAndObserverCalls) {
  Make(SchedulerOptions{});
  backend_->AdvanceClockPerBatch(&clock_, absl::Milliseconds(2));
  const absl::Time t0 = clock_.Now();
  BlockLane();
  const BatchKey key = KeyWithDim(8);  // family "forward/fp32"
  Submit(MakeTask(1, key, &done_, /*batch=*/2, 16, /*bytes=*/100));
  Submit(MakeTask(2, key, &done_, /*batch=*/3, 16, /*bytes=*/200));
  Submit(MakeTask(3, key, &done_, /*batch=*/4, 16, /*bytes=*/300));
  EXPECT_EQ(sched_->queued_requests(), 3);
  clock_.Advance(absl::Milliseconds(5));
  backend_->Unblock();
  ASSERT_TRUE(done_.AwaitCalls(4));

  // The blocker's batch advanced the clock by 2 ms before ours started.
  const auto o = done_.Get(2);
  EXPECT_EQ(o.timings.enqueued, t0);
  EXPECT_EQ(o.timings.batch_start, t0 + absl::Milliseconds(7));
  EXPECT_EQ(o.timings.batch_end, t0 + absl::Milliseconds(9));
  EXPECT_EQ(o.timings.batch_requests, 3);

  EXPECT_EQ(observer_.depths("forward/fp32"),
            (std::vector<int64_t>{1, 2, 3, 0}));
  EXPECT_EQ(observer_.depths("update/fp32"), (std::vector<int64_t>{1, 0}));
  const auto queue_times = observer_.queue_times();
  ASSERT_EQ(queue_times.size(), 4u);
  EXPECT_EQ(queue_times[1], absl::Milliseconds(7));
  const auto batches = observer_.batches();
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_EQ(batches[1].lane, 0);
  EXPECT_EQ(batches[1].key, key);
  EXPECT_EQ(batches[1].requests, 3);
  EXPECT_EQ(batches[1].sequences, 2 + 3 + 4);
  EXPECT_EQ(batches[1].bytes, 100 + 200 + 300);
  EXPECT_EQ(batches[1].busy, absl::Milliseconds(2));

  const SchedulerStats st = sched_->stats();
  EXPECT_EQ(st.submitted, 4);
  EXPECT_EQ(st.completed, 4);
  EXPECT_EQ(st.batches, 2);
  EXPECT_EQ(st.fused_batches, 1);
  EXPECT_EQ(st.max_batch_requests_seen, 3);
  EXPECT_EQ(st.rejected_queue_full + st.dropped_deadline +
                st.dropped_cancelled + st.failed + st.dropped_shutdown,
            0);
}

TEST_F(SchedulerLifecycleTest, UnavailableLaneStaysIdleWhileAnotherServes) {
  backend_ = nullptr;
  auto backend = std::make_unique<RecordingBackend>(2);
  backend->SetLaneAvailable(0, false);
  auto s = Scheduler::Create({}, backend.get(), &clock_, &observer_);
  ASSERT_TRUE(s.ok());
  backend_ = std::move(backend);
  sched_ = std::move(s).value();
  for (uint64_t tag = 1; tag <= 20; ++tag) {
    Submit(MakeTask(tag, KeyWithDim(8 * (tag % 3 + 1)), &done_));
    ASSERT_TRUE(done_.AwaitCalls(tag));
    EXPECT_TRUE(done_.Get(tag).status.ok());
  }
  const auto batches = backend_->batches();
  ASSERT_EQ(batches.size(), 20u);
  for (const auto& b : batches) EXPECT_EQ(b.lane, 1);
}

TEST_F(SchedulerLifecycleTest, NoAvailableLaneFailsTasksWithTheHealthStatus) {
  backend_ = nullptr;
  auto backend = std::make_unique<RecordingBackend>(1);
  backend->SetLaneAvailable(0, false);
  backend->SetHealth(absl::UnavailableError("device 0 failed: ECC error"));
  auto s = Scheduler::Create({}, backend.get(), &clock_, &observer_);
  ASSERT_TRUE(s.ok());
  backend_ = std::move(backend);
  sched_ = std::move(s).value();
  for (uint64_t tag = 1; tag <= 3; ++tag) {
    Submit(MakeTask(tag, KeyWithDim(8), &done_));
  }
  ASSERT_TRUE(done_.AwaitCalls(3));
  for (uint64_t tag = 1; tag <= 3; ++tag) {
    EXPECT_EQ(done_.Get(tag).status,
              absl::UnavailableError("device 0 failed: ECC error"));
  }
  EXPECT_TRUE(backend_->batches().empty());
  EXPECT_EQ(sched_->stats().failed, 3);
  backend_->SetLaneAvailable(0, true);
  Submit(MakeTask(4, KeyWithDim(8), &done_));
  ASSERT_TRUE(done_.AwaitCalls(4));
  EXPECT_TRUE(done_.Get(4).status.ok());
}

// Many submitters over a few keys, several lanes, with cancelled, expired
// and failing tasks mixed in: every task's on_done runs exactly once, every
// computed task reached the backend exactly once, nothing leaks.
TEST_F(SchedulerLifecycleTest, StressEveryTaskCompletesExactlyOnce) {
  SchedulerOptions o;
  o.max_batch_requests = 16;
  o.max_batch_bytes = 64 * 1024;
  o.max_queued_requests = 1 << 20;
  Make(o, /*lanes=*/4);
  const BatchKey keys[] = {KeyWithDim(8), KeyWithDim(16), KeyWithDim(24),
                           KeyWithDim(32, Op::kBackward)};
  constexpr int kThreads = 32, kPerThread = 200;
  auto keepalive = std::make_shared<int>(7);
  std::atomic<int> cancelled_count{0}, expired_count{0};
  std::vector<std::thread> threads;
  CONV1D_TEST_SEED_SCOPE(test_seed, 1234);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<uint32_t>(test_seed + t));
      for (int i = 0; i < kPerThread; ++i) {
        const uint64_t tag = uint64_t(t) * kPerThread + i + 1;
        auto task = MakeTask(tag, keys[rng() % 4], &done_, rng() % 4 + 1,
                             rng() % 100 + 1, rng() % 8192 + 1);
        task->keepalive = keepalive;
        const int r = rng() % 20;
        if (r == 0) {
          task->cancelled = [] { return true; };
          ++cancelled_count;
        } else if (r == 1) {
          task->deadline = clock_.Now() - absl::Seconds(1);
          ++expired_count;
        }
        ASSERT_TRUE(sched_->Submit(&task).ok());
      }
    });
  }
  for (auto& th : threads) th.join();
  constexpr int64_t kTotal = int64_t{kThreads} * kPerThread;
  ASSERT_TRUE(done_.AwaitCalls(kTotal));
  sched_->Shutdown();
  EXPECT_EQ(done_.total_calls(), kTotal);
  EXPECT_EQ(keepalive.use_count(), 1) << "tasks leaked";

  std::map<uint64_t, int> computed;
  for (const auto& b : backend_->batches()) {
    EXPECT_LE(b.segments.size(), 16u);
    for (const auto& seg : b.segments) ++computed[seg.tag];
  }
  int64_t ok = 0, cancelled = 0, expired = 0;
  for (const auto& [tag, outcome] : done_.All()) {
    ASSERT_EQ(outcome.calls, 1) << "tag " << tag;
    switch (outcome.status.code()) {
      case absl::StatusCode::kOk:
        ++ok;
        EXPECT_EQ(computed[tag], 1) << "tag " << tag;
        break;
      case absl::StatusCode::kCancelled:
        ++cancelled;
        EXPECT_EQ(computed.count(tag), 0u);
        break;
      case absl::StatusCode::kDeadlineExceeded:
        ++expired;
        EXPECT_EQ(computed.count(tag), 0u);
        break;
      default:
        ADD_FAILURE() << "tag " << tag << ": " << outcome.status;
    }
  }
  EXPECT_EQ(cancelled, cancelled_count.load());
  EXPECT_EQ(expired, expired_count.load());
  EXPECT_EQ(ok + cancelled + expired, kTotal);
  const SchedulerStats st = sched_->stats();
  EXPECT_EQ(st.submitted, kTotal);
  EXPECT_EQ(st.completed, ok);
  EXPECT_EQ(st.dropped_cancelled, cancelled);
  EXPECT_EQ(st.dropped_deadline, expired);
  EXPECT_EQ(st.failed + st.dropped_shutdown + st.rejected_queue_full, 0);
  EXPECT_GT(st.fused_batches, 0);
  EXPECT_EQ(sched_->queued_requests(), 0);
}

TEST_F(SchedulerLifecycleTest, StressWithFailingBackendAndQueueLimit) {
  SchedulerOptions o;
  o.max_batch_requests = 8;
  o.max_queued_requests = 64;
  Make(o, /*lanes=*/2);
  backend_->FailWith(absl::UnavailableError("lost device"));
  constexpr int kThreads = 8, kPerThread = 200;
  std::atomic<int64_t> accepted{0}, rejected{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const uint64_t tag = uint64_t(t) * kPerThread + i + 1;
        auto task = MakeTask(tag, KeyWithDim(8 * (i % 3 + 1)), &done_);
        absl::Status s = sched_->Submit(&task);
        if (s.ok()) {
          ++accepted;
        } else {
          ASSERT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
          ASSERT_NE(task, nullptr);
          ++rejected;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  sched_->Shutdown();
  EXPECT_EQ(done_.total_calls(), accepted.load());
  for (const auto& [tag, outcome] : done_.All()) {
    ASSERT_EQ(outcome.calls, 1);
    EXPECT_EQ(outcome.status, absl::UnavailableError("lost device"));
  }
  const SchedulerStats st = sched_->stats();
  EXPECT_EQ(st.failed, accepted.load());
  EXPECT_EQ(st.rejected_queue_full, rejected.load());
  EXPECT_EQ(observer_.rejected(RejectReason::kQueueFull), rejected.load());
}

// Submit never waits for the queue lock (accepted tasks go through an
// inbox), so its accept check races Shutdown without a lock: every Submit
// must be either refused (task handed back, on_done never called) or
// accepted and then answered exactly once, and Shutdown must return.
TEST_F(SchedulerLifecycleTest, SubmitsRacingShutdownAreRefusedOrAnsweredOnce) {
  SchedulerOptions o;
  o.max_batch_requests = 8;
  o.max_queued_requests = 4096;
  Make(o, /*lanes=*/3);
  constexpr int kThreads = 16;
  std::atomic<int64_t> accepted{0}, refused{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      while (!go.load()) std::this_thread::yield();
      for (uint64_t i = 0;; ++i) {
        const uint64_t tag = (uint64_t(t) << 32) + i + 1;
        auto task = MakeTask(tag, KeyWithDim(8 * (i % 2 + 1)), &done_);
        const absl::Status s = sched_->Submit(&task);
        if (absl::IsResourceExhausted(s)) {  // the lanes are behind: retry
          ASSERT_NE(task, nullptr);
          std::this_thread::yield();
          continue;
        }
        if (!s.ok()) {
          ASSERT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
          ASSERT_NE(task, nullptr);
          ++refused;
          return;
        }
        ++accepted;
      }
    });
  }
  go = true;
  absl::SleepFor(absl::Milliseconds(20));
  // On a loaded machine the submitters may not have run at all yet: let at
  // least one Submit be accepted before Shutdown races the rest.
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (accepted.load() == 0 && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(1));
  sched_->Shutdown();
  for (auto& th : threads) th.join();
  EXPECT_EQ(refused.load(), kThreads);
  EXPECT_GT(accepted.load(), 0);
  EXPECT_EQ(done_.total_calls(), accepted.load());
  for (const auto& [tag, outcome] : done_.All()) {
    ASSERT_EQ(outcome.calls, 1) << "tag " << tag;
    EXPECT_TRUE(outcome.status.ok()) << outcome.status;
  }
  const SchedulerStats st = sched_->stats();
  EXPECT_EQ(st.submitted, accepted.load());
  EXPECT_EQ(st.completed, accepted.load());
  EXPECT_EQ(sched_->queued_requests(), 0);
  EXPECT_EQ(observer_.rejected(RejectReason::kDraining), kThreads);
}

}  // namespace
}  // namespace conv1d
