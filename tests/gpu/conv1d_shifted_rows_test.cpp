// GPU kernel tests of the shifted vector grid (kVecShifted): channel-first
// long rows whose length is not a whole number of 16-byte vectors, so that
// most rows start between vector boundaries. Forward: every width of the
// fast path, every dtype pair, with and without initial/final states.
// Backward: every width of the fast path with SiLU, bias and every state
// tensor cycled. Alone and fused with aligned rows, against the float64
// reference; and the planner's choice of path.
// Skip without a device (the planner test runs everywhere).
#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <vector>

#include "tests/gpu/gpu_check.h"
#include "tests/gpu/gpu_harness.h"

namespace conv1d::testing {
namespace {

using kernels::KernelLayout;
using kernels::KernelOp;

// Lengths just past a vector multiple and far from one: single-chunk rows
// of one step or less (33, 101, 250), rows of a few steps, and rows long
// enough for several chunks.
constexpr int64_t kLengths[] = {33, 101, 250, 129 * 4 + 1, 1001, 2050, 4093, 8191};

TEST(Conv1dShiftedRows, EveryWidthAndPairMatchesTheReference) {
  REQUIRE_DEVICE();
  std::mt19937_64 rng = TestRng();
  uint32_t n = 0;
  for (const Pair& pr : kPairs) {
    for (int W = 2; W <= 8; ++W) {  // the fast path's widths
      ++n;
      const int64_t L = kLengths[n % std::size(kLengths)];
      // Odd D and B > 1: consecutive rows start at every offset mod 16 bytes.
      const int64_t D = n % 2 ? 7 : 5;
      // States on and off, SiLU and bias cycled.
      const uint32_t bits = (n % 2 ? 0x0cu : 0x00u) | (n % 3 == 0 ? 0x1u : 0x0u) | (n % 4 < 2 ? 0x2u : 0x0u);
      const Conv1dProblem p = MakeProblem(KernelOp::kForward, pr, KernelLayout::kChannelFirst, D, W, bits);
      EXPECT_EQ(RunOneSegment(p, 3, L, rng), "") << "W=" << W << " L=" << L << " bits=" << bits;
    }
  }
}

// The backward on the shifted grid: dx, dweight, dbias and
// dinitial_states against the reference for every width of the fast path
// and every dtype pair, with SiLU, bias and the state tensors on and off,
// single-chunk and multi-chunk rows.
TEST(Conv1dShiftedRows, BackwardEveryWidthAndPairMatchesTheReference) {
  REQUIRE_DEVICE();
  std::mt19937_64 rng = TestRng();
  uint32_t n = 0;
  for (const Pair& pr : kPairs) {
    for (int W = 2; W <= 8; ++W) {
      for (uint32_t bits : {0x00u, 0x1fu, 0x03u, 0x1cu}) {
        ++n;
        const int64_t L = kLengths[(n * 3) % std::size(kLengths)];
        const int64_t D = n % 2 ? 7 : 5;
        const Conv1dProblem p =
            MakeProblem(KernelOp::kBackward, pr, KernelLayout::kChannelFirst, D, W, bits);
        EXPECT_EQ(RunOneSegment(p, 3, L, rng), "") << "W=" << W << " L=" << L << " bits=" << bits;
      }
    }
  }
}

// 24 segments of random B (1..2) and L (1..4096: aligned, shifted and
// short rows) with inputs for `p`.
std::vector<SegmentData> MixedLengthSegments(const Conv1dProblem& p, std::mt19937_64& rng) {
  std::uniform_int_distribution<int64_t> ldist(1, 4096), bdist(1, 2);
  std::vector<SegmentData> segs(24);
  for (auto& s : segs) {
    s.batch = bdist(rng);
    s.seqlen = ldist(rng);
    MakeInputs(p, &s, rng);
  }
  return segs;
}

// A fused launch of mixed lengths gives the reference's values, and every
// fifth segment run alone gives the same bytes in each output.
TEST(Conv1dShiftedRows, MixedLengthsFusedEqualSeparate) {
  REQUIRE_DEVICE();
  std::mt19937_64 rng = TestRng();
  for (const Pair& pr : {kPairs[0], kPairs[2], kPairs[3]}) {
    for (int W : {3, 4, 8}) {
      const Conv1dProblem p = MakeProblem(KernelOp::kForward, pr, KernelLayout::kChannelFirst, 6, W, 0x0f);
      const std::vector<SegmentData> segs = MixedLengthSegments(p, rng);
      ASSERT_NO_FATAL_FAILURE(ExpectFusedEqualSeparate(p, segs, EveryNth(segs.size(), 5)));
    }
  }
}

// The same for the backward.
TEST(Conv1dShiftedRows, BackwardMixedLengthsFusedEqualSeparate) {
  REQUIRE_DEVICE();
  std::mt19937_64 rng = TestRng();
  for (const Pair& pr : {kPairs[0], kPairs[2]}) {
    for (int W : {2, 4, 7}) {
      const Conv1dProblem p = MakeProblem(KernelOp::kBackward, pr, KernelLayout::kChannelFirst, 6, W, 0x1f);
      const std::vector<SegmentData> segs = MixedLengthSegments(p, rng);
      ASSERT_NO_FATAL_FAILURE(ExpectFusedEqualSeparate(p, segs, EveryNth(segs.size(), 5)));
    }
  }
}

// The planner puts aligned rows of more than 32 elements and other
// lengths on the shifted grid, at every fast width; it keeps the staged
// short rows, whole-vector rows and misaligned tensors off it.
TEST(Conv1dShiftedRows, PlannerChoosesTheShiftedGridForLongRowsItCanTake) {
  alignas(16) static float buf[64];
  Conv1dProblem p;
  p.dim = 4;
  p.width = 4;
  auto plan_vec = [&](KernelOp op, kernels::ScalarType t, int64_t L, int misalign, int W = 4) {
    Conv1dProblem q = p;
    q.width = W;
    q.op = op;
    q.x_type = q.weight_type = t;
    kernels::Conv1dSegment s;
    char* base = reinterpret_cast<char*>(buf) + misalign * 2;
    s.set(Role::kX, base);
    s.set(Role::kWeight, buf);
    s.set(op == KernelOp::kForward ? Role::kY : Role::kDx, base);
    if (op == KernelOp::kBackward) {
      s.set(Role::kDout, base);
      s.set(Role::kDweight, buf);
    }
    s.batch = 1;
    s.seqlen = L;
    kernels::Conv1dPlanInfo plan;
    EXPECT_EQ(kernels::Conv1dPlan(q, &s, 1, &plan), hipSuccess);
    return s.vec;
  };
  using kernels::ScalarType;
  EXPECT_EQ(plan_vec(KernelOp::kForward, ScalarType::kF32, 1001, 0), kernels::kVecShifted);
  EXPECT_EQ(plan_vec(KernelOp::kForward, ScalarType::kBF16, 4093, 0), kernels::kVecShifted);
  EXPECT_EQ(plan_vec(KernelOp::kForward, ScalarType::kF32, 1000, 0), 1);
  EXPECT_EQ(plan_vec(KernelOp::kForward, ScalarType::kF32, 101, 0), kernels::kVecShifted);
  EXPECT_EQ(plan_vec(KernelOp::kForward, ScalarType::kBF16, 33, 0), kernels::kVecShifted);
  EXPECT_EQ(plan_vec(KernelOp::kForward, ScalarType::kF32, 31, 0), 0);  // staged short rows
  EXPECT_EQ(plan_vec(KernelOp::kForward, ScalarType::kBF16, 4093, 1), 0);  // misaligned
  EXPECT_EQ(plan_vec(KernelOp::kBackward, ScalarType::kF32, 1001, 0), kernels::kVecShifted);
  EXPECT_EQ(plan_vec(KernelOp::kBackward, ScalarType::kF32, 33, 0, 2), kernels::kVecShifted);
  EXPECT_EQ(plan_vec(KernelOp::kBackward, ScalarType::kF32, 1001, 0, 5), kernels::kVecShifted);
  // fp32 halos past a vector (the stream kernel takes them from two
  // lanes): long rows of whole vectors on the vector path, other rows past
  // 32 elements, short ones too, on the shifted grid, as in the forward.
  EXPECT_EQ(plan_vec(KernelOp::kBackward, ScalarType::kF32, 1001, 0, 8), kernels::kVecShifted);
  EXPECT_EQ(plan_vec(KernelOp::kBackward, ScalarType::kF32, 4096, 0, 8), 1);
  EXPECT_EQ(plan_vec(KernelOp::kBackward, ScalarType::kF32, 64, 0, 8), kernels::kVecShifted);
  EXPECT_EQ(plan_vec(KernelOp::kForward, ScalarType::kF32, 64, 0, 8), kernels::kVecShifted);
  EXPECT_EQ(plan_vec(KernelOp::kBackward, ScalarType::kF32, 31, 0), 0);
  EXPECT_EQ(plan_vec(KernelOp::kBackward, ScalarType::kF32, 1001, 1), 0);  // misaligned
  EXPECT_EQ(plan_vec(KernelOp::kBackward, ScalarType::kBF16, 4093, 0), kernels::kVecShifted);
  EXPECT_EQ(plan_vec(KernelOp::kBackward, ScalarType::kBF16, 33, 0, 8), kernels::kVecShifted);
  EXPECT_EQ(plan_vec(KernelOp::kBackward, ScalarType::kBF16, 4096, 0), 1);
  EXPECT_EQ(plan_vec(KernelOp::kBackward, ScalarType::kBF16, 4093, 1), 0);  // misaligned
}

}  // namespace
}  // namespace conv1d::testing
