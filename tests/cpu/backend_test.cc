// CpuBackend (fused batches equal separate runs), EchoBackend (copies bytes as
// specified) and ThreadPool (covers every index once, concurrent callers).
#include <atomic>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "server/backends/cpu/cpu_backend.h"
#include "server/backends/cpu/cpu_conv.h"
#include "server/util/thread_pool.h"
#include "server/backends/echo/echo_backend.h"
#include "server/core/segment_check.h"
#include "tests/common/test_seed.h"
#include "tests/cpu/test_util.h"

namespace conv1d {
namespace {

using testing_cpu::AllocatePoisoned;
using testing_cpu::MakeProblem;

BatchKey FusedKey(Op op, Layout layout) {
  return testing_cpu::KeyWithStates(op, DType::kBF16, DType::kF32, 4, layout, 40);
}

// Segments of different B, L and weights (some small, one large enough to be
// split across the pool) give exactly what separate single-thread runs give.
TEST(CpuBackend, FusedBatchEqualsSeparateRuns) {
  auto backend = CpuBackend::Create(CpuBackendOptions{.threads = 3, .lanes = 2});
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_EQ((*backend)->num_lanes(), 2);
  EXPECT_EQ((*backend)->devices(), std::vector<std::string>{"cpu (3 threads)"});
  CONV1D_TEST_SEED_SCOPE(test_seed, 500);
  for (Op op : {Op::kForward, Op::kBackward, Op::kUpdate}) {
    for (Layout layout : {Layout::kChannelFirst, Layout::kChannelLast}) {
      const BatchKey key = FusedKey(op, layout);
      const int64_t shapes[][2] = {{1, 1}, {3, 17}, {2, 4000}, {1, 129}, {4, 5}};
      std::vector<ConvBuffers> fused, alone;
      uint64_t seed = test_seed;
      for (const auto& bl : shapes) {
        fused.push_back(MakeProblem(key, bl[0], bl[1], op == Op::kUpdate ? 6 : 0, seed++));
      }
      alone = fused;
      std::vector<ConvSegment> segments;
      for (ConvBuffers& p : fused) AllocatePoisoned(&p);
      for (ConvBuffers& p : fused) segments.push_back(p.Segment());
      std::vector<ConvSegment*> ptrs;
      for (ConvSegment& s : segments) ptrs.push_back(&s);
      BatchStats stats;
      ASSERT_TRUE((*backend)->RunBatch(1, key, ptrs, &stats).ok());
      EXPECT_GT(stats.launches, 0);
      for (size_t i = 0; i < alone.size(); ++i) {
        ASSERT_TRUE(RunCpuConv(&alone[i], nullptr).ok());
        EXPECT_EQ(fused[i].y, alone[i].y) << i;
        EXPECT_EQ(fused[i].final_states, alone[i].final_states) << i;
        EXPECT_EQ(fused[i].dx, alone[i].dx) << i;
        EXPECT_EQ(fused[i].dweight, alone[i].dweight) << i;
        EXPECT_EQ(fused[i].dbias, alone[i].dbias) << i;
        EXPECT_EQ(fused[i].dinitial_states, alone[i].dinitial_states) << i;
        EXPECT_EQ(fused[i].conv_state_out, alone[i].conv_state_out) << i;
      }
    }
  }
}

TEST(CpuBackend, RejectsBadOptionsLaneAndSegment) {
  EXPECT_FALSE(CpuBackend::Create(CpuBackendOptions{.threads = -1}).ok());
  EXPECT_FALSE(CpuBackend::Create(CpuBackendOptions{.lanes = 0}).ok());
  auto backend = CpuBackend::Create(CpuBackendOptions{.threads = 1, .lanes = 1});
  ASSERT_TRUE(backend.ok());
  const BatchKey key = FusedKey(Op::kForward, Layout::kChannelFirst);
  ConvBuffers p = MakeProblem(key, 1, 8, 0, 1);
  p.AllocateOutputs();
  ConvSegment s = p.Segment();
  ConvSegment* ptr = &s;
  EXPECT_FALSE((*backend)->RunBatch(1, key, {&ptr, 1}, nullptr).ok());
  s.x.bytes = 2;
  EXPECT_EQ(ValidateSegment(key, s).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*backend)->RunBatch(0, key, {&ptr, 1}, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

std::vector<uint8_t> Bytes(size_t n, uint8_t first) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(first + 7 * i);
  return v;
}

TensorView In(const std::vector<uint8_t>& v) {
  TensorView t;
  t.data = v.data();
  t.bytes = static_cast<int64_t>(v.size());
  return t;
}
OutputView Out(std::vector<uint8_t>& v) {
  OutputView t;
  t.data = v.data();
  t.bytes = static_cast<int64_t>(v.size());
  return t;
}

TEST(EchoBackend, CopiesInputsToOutputs) {
  auto echo = EchoBackend::Create(EchoBackendOptions{.lanes = 3});
  ASSERT_TRUE(echo.ok());
  EXPECT_EQ((*echo)->num_lanes(), 3);
  EXPECT_STREQ((*echo)->name(), "echo");
  const auto x = Bytes(64, 1), dout = Bytes(64, 2), weight = Bytes(24, 3), bias = Bytes(8, 4),
             init = Bytes(12, 5), dfinal = Bytes(12, 6), state = Bytes(20, 7);
  std::vector<uint8_t> y(64, 0xee), dx(64, 0xee), dweight(24, 0xee), dbias(8, 0xee),
      final_states(12, 0xee), dinit(12, 0xee), state_out(20, 0xee), longer(30, 0xee);
  ConvSegment s;
  s.x = In(x);
  s.dout = In(dout);
  s.weight = In(weight);
  s.bias = In(bias);
  s.initial_states = In(init);
  s.dfinal_states = In(dfinal);
  s.conv_state = In(state);
  s.y = Out(y);
  s.dx = Out(dx);
  s.dweight = Out(dweight);
  s.dbias = Out(dbias);
  s.final_states = Out(final_states);
  s.dinitial_states = Out(dinit);
  s.conv_state_out = Out(state_out);
  ConvSegment t;  // x only; longer output than input; zero-filled outputs
  t.x = In(bias);
  t.y = Out(longer);
  t.dx = Out(dx);
  t.dbias = Out(dbias);
  ConvSegment* segs[] = {&s};
  ASSERT_TRUE((*echo)->RunBatch(2, BatchKey{}, segs, nullptr).ok());
  EXPECT_EQ(y, x);
  EXPECT_EQ(dx, dout);
  EXPECT_EQ(dweight, weight);
  EXPECT_EQ(dbias, bias);
  EXPECT_EQ(final_states, init);
  EXPECT_EQ(dinit, dfinal);
  EXPECT_EQ(state_out, state);
  std::vector<uint8_t> dx_before = dx;
  EchoBackend::EchoSegment(t);
  EXPECT_TRUE(std::equal(bias.begin(), bias.end(), longer.begin()));
  EXPECT_TRUE(std::all_of(longer.begin() + bias.size(), longer.end(), [](uint8_t b) { return b == 0; }));
  EXPECT_TRUE(std::equal(bias.begin(), bias.end(), dx.begin()));  // dx <- x without dout
  EXPECT_TRUE(std::all_of(dbias.begin(), dbias.end(), [](uint8_t b) { return b == 0; }));
  EXPECT_FALSE((*echo)->RunBatch(3, BatchKey{}, segs, nullptr).ok());
  EXPECT_FALSE(EchoBackend::Create(EchoBackendOptions{.lanes = 0}).ok());
}

TEST(ThreadPool, CoversEveryIndexOnceUnderConcurrentCallers) {
  auto pool = ThreadPool::Create(ThreadPoolOptions{.threads = 4});
  ASSERT_TRUE(pool.ok());
  EXPECT_EQ((*pool)->num_threads(), 4);
  auto run = [&](int64_t n, int64_t min_block) {
    std::vector<std::atomic<int>> hits(n);
    (*pool)->ParallelFor(n, min_block, [&](int64_t b, int64_t e) {
      EXPECT_LE(0, b);
      EXPECT_LE(e, n);
      for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << i << " of " << n;
  };
  for (int64_t n : {0, 1, 2, 7, 100, 12345}) run(n, 1);
  run(1000, 300);
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&] {
      for (int r = 0; r < 200; ++r) run(97 + r, 1 + r % 5);
    });
  }
  for (auto& t : callers) t.join();
  // Nested loops make progress because callers take part in their own loop.
  std::atomic<int64_t> total{0};
  (*pool)->ParallelFor(8, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      (*pool)->ParallelFor(50, 1, [&](int64_t b2, int64_t e2) { total += e2 - b2; });
    }
  });
  EXPECT_EQ(total.load(), 400);
}

}  // namespace
}  // namespace conv1d
