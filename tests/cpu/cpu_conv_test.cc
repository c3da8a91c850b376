// CpuConvSegment against the float64 reference: every op, dtype pair, width
// 1-5 and 17, both layouts, odd lengths, with and without bias, SiLU and
// states; outputs are poisoned first so every element must be written.
#include <memory>
#include <string>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/backends/cpu/cpu_conv.h"
#include "server/util/thread_pool.h"
#include "tests/common/test_seed.h"
#include "tests/cpu/test_util.h"

namespace conv1d {
namespace {

using testing_cpu::AllocatePoisoned;
using testing_cpu::ExpectMatchesReference;
using testing_cpu::MakeProblem;
using testing_cpu::RunReference;

ThreadPool* SharedPool() {
  static ThreadPool* pool = ThreadPool::Create(ThreadPoolOptions{.threads = 3})->release();
  return pool;
}

// Runs one problem on the CPU backend (poisoned outputs) and compares.
void CheckOne(const BatchKey& key, int64_t batch, int64_t seqlen, int64_t state_len,
              uint64_t seed, ThreadPool* pool) {
  ConvBuffers p = MakeProblem(key, batch, seqlen, state_len, seed);
  AllocatePoisoned(&p);
  const std::string context =
      absl::StrCat(key.DebugString(), " B=", batch, " L=", seqlen, " K=", state_len);
  ASSERT_TRUE(CpuConvSegment(key, p.Segment(), pool).ok()) << context;
  ExpectMatchesReference(p, RunReference(p), context);
}

using SweepParam = std::tuple<Op, DType, DType, int, Layout>;

class CpuConvSweep : public ::testing::TestWithParam<SweepParam> {};

TEST_P(CpuConvSweep, MatchesReference) {
  const auto [op, xt, wt, width, layout] = GetParam();
  CONV1D_TEST_SEED_SCOPE(test_seed, 1);
  uint64_t seed = test_seed;
  for (int64_t seqlen : {1, 2, 3, 129, 1000}) {
    for (int options = 0; options < 8; ++options) {
      BatchKey key;
      key.op = op;
      key.x_dtype = xt;
      key.weight_dtype = wt;
      key.grad_weight_dtype = (options & 1) ? wt : DType::kF32;
      key.dim = layout == Layout::kChannelLast ? 5 : 3;
      key.width = width;
      key.layout = layout;
      key.has_bias = options & 1;
      key.activation = (options & 2) ? Activation::kSiLU : Activation::kNone;
      const bool states = options & 4;
      if (op == Op::kForward) {
        key.has_initial_states = states;
        key.return_final_states = states || (options & 1);
      } else if (op == Op::kBackward) {
        key.has_initial_states = states;
        key.has_dfinal_states = states || (options & 2);
        key.return_dinitial_states = states || (options & 1);
      }
      const int64_t state_len = op == Op::kUpdate ? width - 1 + (options & 4 ? 3 : 0) : 0;
      // Alternate the caller-only path and the pool.
      CheckOne(key, /*batch=*/2, seqlen, state_len, seed++,
               (options & 1) ? SharedPool() : nullptr);
    }
  }
}

std::string SweepName(const ::testing::TestParamInfo<SweepParam>& info) {
  const auto [op, xt, wt, width, layout] = info.param;
  return absl::StrCat(OpName(op), "_", DTypeName(xt), "_", DTypeName(wt), "_W", width, "_",
                      layout == Layout::kChannelFirst ? "cf" : "cl");
}

INSTANTIATE_TEST_SUITE_P(
    All, CpuConvSweep,
    ::testing::Combine(::testing::Values(Op::kForward, Op::kBackward, Op::kUpdate),
                       ::testing::Values(DType::kF32, DType::kF16, DType::kBF16),
                       ::testing::Values(DType::kF32, DType::kF16, DType::kBF16),
                       ::testing::Values(1, 2, 3, 4, 5, 17),
                       ::testing::Values(Layout::kChannelFirst, Layout::kChannelLast)),
    SweepName);

BatchKey FullKey(Op op, DType xt, int width, Layout layout, int64_t dim) {
  return testing_cpu::KeyWithStates(op, xt, xt, width, layout, dim);
}

// Wide filters up to the limit, every op and layout, in fp32 and bf16, with
// lengths shorter and longer than the filter; channel-first rows that cross
// a row chunk with W = kMaxWidth.
TEST(CpuConv, WideFilters) {
  CONV1D_TEST_SEED_SCOPE(test_seed, 100);
  uint64_t seed = test_seed;
  for (int width : {33, 64, 100, 255, kMaxWidth}) {
    for (Op op : {Op::kForward, Op::kBackward, Op::kUpdate}) {
      for (Layout layout : {Layout::kChannelFirst, Layout::kChannelLast}) {
        for (int64_t seqlen : {5, 300}) {
          const DType dt = width % 2 ? DType::kBF16 : DType::kF32;
          CheckOne(FullKey(op, dt, width, layout, 3), 2, seqlen,
                   op == Op::kUpdate ? width - 1 + seqlen % 7 : 0, seed++, SharedPool());
        }
      }
    }
  }
  for (Op op : {Op::kForward, Op::kBackward}) {
    CheckOne(FullKey(op, DType::kF32, kMaxWidth, Layout::kChannelFirst, 2), 1, 2100, 0, seed++,
             SharedPool());
  }
}

// Lengths crossing the channel-first row chunks and channel counts crossing
// the channel-last tiles.
TEST(CpuConv, CrossesChunkAndTileEdges) {
  CONV1D_TEST_SEED_SCOPE(test_seed, 200);
  uint64_t seed = test_seed;
  for (Op op : {Op::kForward, Op::kBackward}) {
    for (int width : {4, 7}) {
      CheckOne(FullKey(op, DType::kBF16, width, Layout::kChannelFirst, 2), 2, 4100, 0, seed++,
               SharedPool());
      CheckOne(FullKey(op, DType::kF16, width, Layout::kChannelLast, 300), 2, 131, 0, seed++,
               SharedPool());
    }
  }
}

// dweight/dbias do not depend on the thread count (fixed summation order).
TEST(CpuConv, BackwardIsDeterministicAcrossThreadCounts) {
  CONV1D_TEST_SEED_SCOPE(test_seed, 7);
  for (Layout layout : {Layout::kChannelFirst, Layout::kChannelLast}) {
    const BatchKey key = FullKey(Op::kBackward, DType::kF32, 4, layout, 260);
    ConvBuffers a = MakeProblem(key, 3, 700, 0, test_seed);
    ConvBuffers b = a;
    auto one = ThreadPool::Create(ThreadPoolOptions{.threads = 1});
    auto four = ThreadPool::Create(ThreadPoolOptions{.threads = 4});
    ASSERT_TRUE(one.ok() && four.ok());
    ASSERT_TRUE(RunCpuConv(&a, one->get()).ok());
    ASSERT_TRUE(RunCpuConv(&b, four->get()).ok());
    EXPECT_EQ(a.dweight, b.dweight);
    EXPECT_EQ(a.dbias, b.dbias);
    EXPECT_EQ(a.dx, b.dx);
    EXPECT_EQ(a.dinitial_states, b.dinitial_states);
  }
}

TEST(CpuConv, RejectsMissingAndShortTensors) {
  BatchKey key = FullKey(Op::kForward, DType::kF32, 4, Layout::kChannelFirst, 8);
  ConvBuffers p = MakeProblem(key, 2, 10, 0, 3);
  p.AllocateOutputs();
  ConvSegment s = p.Segment();
  s.bias = TensorView{};
  absl::Status st = CpuConvSegment(key, s, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("bias"), absl::string_view::npos) << st;
  s = p.Segment();
  s.y.bytes -= 1;
  st = CpuConvSegment(key, s, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("y"), absl::string_view::npos) << st;
  key.width = kMaxWidth + 1;
  EXPECT_EQ(CpuConvSegment(key, p.Segment(), nullptr).code(), absl::StatusCode::kInvalidArgument);
  BatchKey upd = FullKey(Op::kUpdate, DType::kF32, 4, Layout::kChannelFirst, 8);
  ConvBuffers u = MakeProblem(upd, 1, 1, 2, 3);  // state shorter than W-1
  u.AllocateOutputs();
  EXPECT_EQ(CpuConvSegment(upd, u.Segment(), nullptr).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace conv1d
