// Overload and lifecycle over a real port, with a backend that holds its
// batches until the test opens a gate: a full queue answers
// RESOURCE_EXHAUSTED with a retry hint, an expired deadline answers
// DEADLINE_EXCEEDED and the task is dropped before compute, and an
// in-process Shutdown reports NOT_SERVING first and finishes in-flight calls.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "server/frontend/status_mapping.h"
#include "tests/e2e/e2e_util.h"
#include "tests/e2e/gated_backend.h"

namespace conv1d::e2e {
namespace {

// One asynchronous Forward and what came back.
struct AsyncCall {
  grpc::ClientContext context;
  v1::ForwardRequest request;
  v1::ForwardResponse response;
  grpc::Status status;
  absl::Notification done;
  void Start(v1::Conv1d::Stub* stub) {
    stub->async()->Forward(&context, &request, &response, [this](grpc::Status s) {
      status = std::move(s);
      done.Notify();
    });
  }
  bool Wait() { return done.WaitForNotificationWithTimeout(absl::Seconds(20)); }
};

class OverloadTest : public ::testing::Test {
 protected:
  void Start(SchedulerOptions scheduler, absl::Duration drain_grace = absl::ZeroDuration()) {
    auto backend = std::make_unique<GatedBackend>(1);
    gate_ = backend.get();
    ServerOptions options;
    options.backend_instance = std::move(backend);
    options.scheduler = scheduler;
    ASSERT_NO_FATAL_FAILURE(StartTestServer(std::move(options), &ts_, drain_grace));
  }
  void TearDown() override {
    if (gate_ != nullptr) gate_->Open();  // never leave a lane blocked
  }
  std::unique_ptr<AsyncCall> Send() {
    auto call = std::make_unique<AsyncCall>();
    Case c;
    call->request = MakeForward(c, MakeInputs(c, &rng_));
    call->Start(ts_.stub.get());
    return call;
  }
  bool AwaitQueued(int64_t n) {
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    while (ts_.server->queued_requests() != n) {
      if (absl::Now() > give_up) return false;
      absl::SleepFor(absl::Milliseconds(1));
    }
    return true;
  }

  TestServer ts_;
  GatedBackend* gate_ = nullptr;
  Rng rng_{5};
};

TEST_F(OverloadTest, FullQueueAnswersResourceExhaustedWithRetryHint) {
  SchedulerOptions s;
  s.max_batch_requests = 1;
  s.max_queued_requests = 2;
  ASSERT_NO_FATAL_FAILURE(Start(s));
  std::unique_ptr<AsyncCall> running = Send();
  ASSERT_TRUE(gate_->AwaitEntered(1));
  std::unique_ptr<AsyncCall> queued1 = Send();
  std::unique_ptr<AsyncCall> queued2 = Send();
  ASSERT_TRUE(AwaitQueued(2));

  std::unique_ptr<AsyncCall> refused = Send();
  ASSERT_TRUE(refused->Wait());
  EXPECT_EQ(refused->status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << refused->status.error_message();
  const auto& trailers = refused->context.GetServerTrailingMetadata();
  auto hint = trailers.find(kRetryPushbackKey);
  ASSERT_NE(hint, trailers.end());
  EXPECT_EQ(std::string(hint->second.data(), hint->second.size()),
            std::to_string(kRetryPushbackMs));

  gate_->Open();
  for (AsyncCall* c : {running.get(), queued1.get(), queued2.get()}) {
    ASSERT_TRUE(c->Wait());
    EXPECT_TRUE(c->status.ok()) << c->status.error_message();
    EXPECT_EQ(c->response.y().data(), c->request.x().data());  // echo
  }
  EXPECT_EQ(ts_.server->scheduler_stats().rejected_queue_full, 1);
  EXPECT_EQ(ts_.server->scheduler_stats().completed, 3);
}

TEST_F(OverloadTest, ExpiredDeadlineAnswersDeadlineExceededAndSkipsCompute) {
  ASSERT_NO_FATAL_FAILURE(Start(SchedulerOptions()));
  std::unique_ptr<AsyncCall> running = Send();
  ASSERT_TRUE(gate_->AwaitEntered(1));
  auto late = std::make_unique<AsyncCall>();
  Case c;
  late->request = MakeForward(c, MakeInputs(c, &rng_));
  // Long enough that the call reaches the server's queue before it expires
  // even when this (loaded) machine stalls the client or the server for a
  // while: a call that expired in transit is never queued.
  constexpr absl::Duration kLateDeadline = absl::Seconds(1);
  late->context.set_deadline(absl::ToChronoTime(absl::Now() + kLateDeadline));
  late->Start(ts_.stub.get());
  // The deadline travels as a timeout, so the server's copy runs from when it
  // received the call: make sure that has happened, and has passed, before
  // the lane is freed.
  ASSERT_TRUE(AwaitQueued(1));
  const absl::Time server_deadline_passed =
      absl::Now() + kLateDeadline + absl::Milliseconds(50);
  ASSERT_TRUE(late->Wait());
  EXPECT_EQ(late->status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  absl::SleepFor(server_deadline_passed - absl::Now());

  gate_->Open();
  ASSERT_TRUE(running->Wait());
  EXPECT_TRUE(running->status.ok());
  // The expired task is dropped, not computed (as expired or as cancelled,
  // whichever the lane sees first).
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  SchedulerStats stats;
  do {
    stats = ts_.server->scheduler_stats();
  } while (stats.dropped_deadline + stats.dropped_cancelled < 1 && absl::Now() < give_up);
  EXPECT_EQ(stats.dropped_deadline + stats.dropped_cancelled, 1);
  EXPECT_EQ(stats.completed, 1);
}

TEST_F(OverloadTest, ShutdownReportsNotServingFirstAndFinishesInFlightCalls) {
  // The grace must outlast seeing NOT_SERVING and sending one more call,
  // however slowly a loaded machine runs this thread: 3 s.
  constexpr absl::Duration kGrace = absl::Seconds(3);
  ASSERT_NO_FATAL_FAILURE(Start(SchedulerOptions(), kGrace));
  EXPECT_EQ(HealthCheck(ts_.channel.get()), 1);
  EXPECT_EQ(HealthCheck(ts_.channel.get(), "conv1d.v1.Conv1d"), 1);
  std::unique_ptr<AsyncCall> running = Send();
  ASSERT_TRUE(gate_->AwaitEntered(1));
  std::unique_ptr<AsyncCall> queued = Send();
  ASSERT_TRUE(AwaitQueued(1));

  absl::Notification shut_down;
  std::thread drainer([&] {
    ts_.server->Shutdown(absl::Now() + absl::Seconds(20));
    shut_down.Notify();
  });
  // NOT_SERVING comes first, while the server still accepts calls.
  const absl::Time give_up = absl::Now() + absl::Seconds(5);
  while (HealthCheck(ts_.channel.get()) != 2 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  EXPECT_EQ(HealthCheck(ts_.channel.get(), "conv1d.v1.Conv1d"), 2);
  std::unique_ptr<AsyncCall> during_grace = Send();
  ASSERT_TRUE(AwaitQueued(2));
  EXPECT_FALSE(shut_down.HasBeenNotified());

  absl::SleepFor(kGrace + absl::Milliseconds(100));  // past the grace: no longer accepting
  EXPECT_FALSE(shut_down.HasBeenNotified());  // in-flight calls hold the drain
  gate_->Open();
  for (AsyncCall* c : {running.get(), queued.get(), during_grace.get()}) {
    ASSERT_TRUE(c->Wait());
    EXPECT_TRUE(c->status.ok()) << c->status.error_message();
  }
  ASSERT_TRUE(shut_down.WaitForNotificationWithTimeout(absl::Seconds(20)));
  drainer.join();
  EXPECT_FALSE(ts_.server->serving());
  EXPECT_EQ(ts_.server->scheduler_stats().completed, 3);

  std::unique_ptr<AsyncCall> after = Send();
  ASSERT_TRUE(after->Wait());
  EXPECT_EQ(after->status.error_code(), grpc::StatusCode::UNAVAILABLE);
}

}  // namespace
}  // namespace conv1d::e2e
