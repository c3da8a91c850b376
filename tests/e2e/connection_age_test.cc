// ServerOptions::max_connection_age_ms over a real port: the server closes a
// client's connection once it is older than the age (GOAWAY), the client's
// channel reconnects by itself, and neither the calls sent across the
// rotation nor a call in flight on the old connection fail.
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "tests/common/test_seed.h"
#include "tests/e2e/e2e_util.h"
#include "tests/e2e/gated_backend.h"

namespace conv1d::e2e {
namespace {

// Records every connectivity state a channel passes through, from a thread
// of its own (a poll loop could miss a short IDLE or CONNECTING).
class StateRecorder {
 public:
  explicit StateRecorder(std::shared_ptr<grpc::Channel> channel)
      : channel_(std::move(channel)), thread_([this] { Run(); }) {}
  ~StateRecorder() {
    stop_.store(true);
    thread_.join();
  }
  // How many times the channel has become READY.
  int ready_count() {
    absl::MutexLock lock(&mu_);
    int n = 0;
    for (grpc_connectivity_state s : states_) n += s == GRPC_CHANNEL_READY;
    return n;
  }
  std::string History() {
    absl::MutexLock lock(&mu_);
    return absl::StrJoin(states_, " -> ");
  }

 private:
  void Run() {
    grpc_connectivity_state last = channel_->GetState(false);
    Add(last);
    while (!stop_.load()) {
      if (channel_->WaitForStateChange(last, absl::ToChronoTime(absl::Now() +
                                                                absl::Milliseconds(20)))) {
        last = channel_->GetState(false);
        Add(last);
      }
    }
  }
  void Add(grpc_connectivity_state s) {
    absl::MutexLock lock(&mu_);
    states_.push_back(s);
  }

  std::shared_ptr<grpc::Channel> channel_;
  std::atomic<bool> stop_{false};
  absl::Mutex mu_;
  std::vector<grpc_connectivity_state> states_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

TEST(ConnectionAge, ConnectionIsRotatedWithoutFailingCalls) {
  auto backend = std::make_unique<GatedBackend>(1);
  GatedBackend* gate = backend.get();
  ServerOptions options;
  options.backend_instance = std::move(backend);
  options.max_connection_age_ms = 1000;
  options.max_connection_age_grace_ms = 10000;
  TestServer ts;
  ASSERT_NO_FATAL_FAILURE(StartTestServer(std::move(options), &ts));

  // The connection cannot be older than this, so no rotation comes before
  // the age (less its 10 % jitter) has passed since.
  const absl::Time before_connecting = absl::Now();
  std::shared_ptr<grpc::Channel> channel =
      MakeChannel(absl::StrCat("127.0.0.1:", ts.server->bound_port()), /*fresh=*/true);
  StateRecorder recorder(channel);
  auto stub = v1::Conv1d::NewStub(channel);

  // A call held in the backend from the first connection's start until after
  // its rotation: the grace period must let it finish.
  CONV1D_TEST_SEED_SCOPE(test_seed, 3);
  Rng rng(test_seed);
  Case c;
  v1::ForwardRequest held_request = MakeForward(c, MakeInputs(c, &rng));
  grpc::ClientContext held_context;
  held_context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(20)));
  v1::ForwardResponse held_response;
  grpc::Status held_status;
  absl::Notification held_done;
  stub->async()->Forward(&held_context, &held_request, &held_response, [&](grpc::Status s) {
    held_status = std::move(s);
    held_done.Notify();
  });
  ASSERT_TRUE(gate->AwaitEntered(1));

  // Calls keep going across the age (1 s, +-10 % jitter) until the channel
  // has connected a second time (normally within 2 s; the bound and the
  // calls' deadlines allow for a loaded machine).
  int calls = 0;
  std::vector<std::string> failures;
  const absl::Time start = absl::Now();
  while (recorder.ready_count() < 2 && absl::Now() - start < absl::Seconds(15)) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    v1::ServerInfoResponse info;
    const grpc::Status s = stub->ServerInfo(&ctx, v1::ServerInfoRequest(), &info);
    ++calls;
    if (!s.ok()) failures.push_back(absl::StrCat(s.error_code(), ": ", s.error_message()));
    absl::SleepFor(absl::Milliseconds(10));
  }
  const absl::Duration rotated_after = absl::Now() - before_connecting;
  EXPECT_GE(recorder.ready_count(), 2) << "states: " << recorder.History();
  EXPECT_GE(rotated_after, absl::Milliseconds(900)) << "rotated before the age";
  EXPECT_TRUE(failures.empty()) << failures.size() << " of " << calls
                                << " calls failed, first: " << failures.front();
  EXPECT_FALSE(held_done.HasBeenNotified()) << held_status.error_message();

  gate->Open();
  ASSERT_TRUE(held_done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_TRUE(held_status.ok()) << held_status.error_message();
  EXPECT_EQ(held_response.y().data(), held_request.x().data());  // echo
}

TEST(ConnectionAge, ZeroKeepsTheConnection) {
  ServerOptions options;
  options.backend.name = "echo";
  TestServer ts;
  ASSERT_NO_FATAL_FAILURE(StartTestServer(std::move(options), &ts));
  std::shared_ptr<grpc::Channel> channel =
      MakeChannel(absl::StrCat("127.0.0.1:", ts.server->bound_port()), /*fresh=*/true);
  StateRecorder recorder(channel);
  auto stub = v1::Conv1d::NewStub(channel);
  const absl::Time end = absl::Now() + absl::Milliseconds(1500);
  while (absl::Now() < end) {
    grpc::ClientContext ctx;
    v1::ServerInfoResponse info;
    ASSERT_TRUE(stub->ServerInfo(&ctx, v1::ServerInfoRequest(), &info).ok());
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(recorder.ready_count(), 1) << "states: " << recorder.History();
}

}  // namespace
}  // namespace conv1d::e2e
