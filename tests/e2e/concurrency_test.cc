// 32 concurrent clients over a real loopback port, every op, dtype pair,
// layout, width 1..256, with and without bias / states / SiLU, weights inline
// and registered; every answer is checked against CpuConvSegment run locally
// on the same inputs, and fused batches must have happened.
#include <latch>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/common/test_seed.h"
#include "tests/e2e/e2e_util.h"

namespace conv1d::e2e {
namespace {

constexpr int kKeys = 16;
constexpr int kThreads = 2 * kKeys;  // threads t and t + kKeys share a key
constexpr int kIterations = 6;

std::vector<Case> MakeKeys(uint64_t seed) {
  static constexpr Op kOps[] = {Op::kForward, Op::kBackward, Op::kUpdate};
  static constexpr DType kDTypes[] = {DType::kF32, DType::kF16, DType::kBF16};
  Rng rng(seed);
  std::vector<Case> keys;
  for (int k = 0; k < kKeys; ++k) {
    Case c = RandomCase(kOps[k % 3], &rng);
    c.x_dtype = kDTypes[(k / 3) % 3];  // all nine op x dtype pairs in 0..8
    c.layout = k % 2 ? Layout::kChannelLast : Layout::kChannelFirst;
    keys.push_back(c);
  }
  // Corners that random picks may miss.
  keys[1].width = 1;  // backward with 0-column states
  keys[1].dinitial_states = true;
  keys[3].width = 256;
  keys[4].w_dtype = DType::kF32;  // fp16 activations, fp32 weights
  keys[5].width = 1;              // update with W = 1
  return keys;
}

void ClientThread(int t, uint64_t seed, const Case& key, const std::shared_ptr<grpc::Channel>& channel,
                  std::latch* start) {
  Rng rng(seed + 1 + t);
  std::unique_ptr<v1::Conv1d::Stub> stub = v1::Conv1d::NewStub(channel);
  Case c = key;
  // A quarter of the keys use registered weights, one set per thread.
  const bool registered = (t % kKeys) % 4 == 1;
  Inputs registered_inputs;
  if (registered) {
    c.weights_name = absl::StrCat("e2e/thread-", t);
    registered_inputs = MakeInputs(c, &rng);
    grpc::ClientContext ctx;
    v1::RegisterWeightsResponse resp;
    grpc::Status s =
        stub->RegisterWeights(&ctx, MakeRegisterRequest(c, registered_inputs, false), &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(resp.info().dim(), c.dim);
    EXPECT_EQ(resp.info().width(), c.width);
  }
  start->arrive_and_wait();  // before any early return: the others wait for it
  for (int i = 0; i < kIterations; ++i) {
    // B, L and the update's state length vary; the batch key does not.
    c.batch = 1 + static_cast<int64_t>(rng() % 3);
    c.seqlen = c.op == Op::kUpdate ? 1 + static_cast<int64_t>(rng() % 4)
                                   : 1 + static_cast<int64_t>(rng() % 96);
    if (c.op == Op::kUpdate) {
      c.state_len = std::max<int64_t>(1, c.width - 1 + static_cast<int64_t>(rng() % 3));
    }
    Inputs in = MakeInputs(c, &rng);
    if (registered) {
      in.weight = registered_inputs.weight;
      in.bias = registered_inputs.bias;
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
    grpc::Status s;
    std::string errors;
    switch (c.op) {
      case Op::kForward: {
        v1::ForwardResponse r;
        s = stub->Forward(&ctx, MakeForward(c, in), &r);
        if (s.ok()) errors = CheckForward(c, in, r);
        break;
      }
      case Op::kBackward: {
        v1::BackwardResponse r;
        s = stub->Backward(&ctx, MakeBackward(c, in), &r);
        if (s.ok()) errors = CheckBackward(c, in, r);
        break;
      }
      case Op::kUpdate: {
        v1::UpdateResponse r;
        s = stub->Update(&ctx, MakeUpdate(c, in), &r);
        if (s.ok()) errors = CheckUpdate(c, in, r);
        break;
      }
    }
    EXPECT_TRUE(s.ok()) << c.DebugString() << ": " << s.error_code() << " "
                        << s.error_message();
    EXPECT_EQ(errors, "") << c.DebugString();
  }
}

TEST(E2eConcurrency, ThirtyTwoClientsGetAnswersMatchingTheCpuReference) {
  ServerOptions options;
  options.backend.name = BackendUnderTest();
  options.backend.threads = 2;
  options.backend.lanes = 2;
  // A few ms of queue delay make fused batches certain.
  options.scheduler.max_queue_delay_us = 4000;
  TestServer ts;
  ASSERT_NO_FATAL_FAILURE(StartTestServer(std::move(options), &ts));

  CONV1D_TEST_SEED_SCOPE(test_seed, 20261122);
  const std::vector<Case> keys = MakeKeys(test_seed);
  std::latch start(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    // Half the clients share one connection, half bring their own.
    std::shared_ptr<grpc::Channel> channel =
        t % 2 == 0 ? ts.channel
                   : MakeChannel(absl::StrCat("127.0.0.1:", ts.server->bound_port()), true);
    threads.emplace_back(ClientThread, t, test_seed, std::cref(keys[t % kKeys]), channel, &start);
  }
  for (std::thread& th : threads) th.join();

  const SchedulerStats stats = ts.server->scheduler_stats();
  EXPECT_EQ(stats.submitted, kThreads * kIterations);
  EXPECT_EQ(stats.completed, kThreads * kIterations);
  EXPECT_GT(stats.fused_batches, 0);
  EXPECT_GT(stats.max_batch_requests_seen, 1);
  EXPECT_EQ(stats.failed, 0);

  grpc::ClientContext ctx;
  v1::ListWeightsResponse list;
  ASSERT_TRUE(ts.stub->ListWeights(&ctx, v1::ListWeightsRequest(), &list).ok());
  EXPECT_EQ(list.weights_size(), 2 * 4);  // keys 1, 5, 9, 13, two threads each
}

}  // namespace
}  // namespace conv1d::e2e
