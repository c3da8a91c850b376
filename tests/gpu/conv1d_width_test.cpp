// GPU kernel tests over the kernel width: every fast width 1..8 on every
// op, layout and dtype pair, at lengths that reach each channel-first kind
// (short rows, long rows, 16-bit stream chunks) on the vector and scalar
// paths; a sample of wide widths up to kMaxKernelWidth on the general path;
// ragged launches of mixed lengths (L from 1 to 4096) and mixed weights;
// and the workspace query against the planner. Fresh random inputs
// (TestRng prints the seed), poisoned outputs, float64 reference. Skips the
// device tests without a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "tests/gpu/gpu_check.h"
#include "tests/gpu/gpu_harness.h"

namespace conv1d::testing {
namespace {

using kernels::KernelLayout;
using kernels::KernelOp;

// Every op at W = 1..8 with fresh inputs per case: lengths cover short
// vector rows (8, 64), a scalar row (13), long vector rows in one and
// several chunks (512, 2056) and a row that is not a whole number of
// vectors (1029); D = 8 keeps the channel-last vector path, D = 5 not.
TEST(Conv1dGpuWidth, EveryFastWidth) {
  REQUIRE_DEVICE();
  std::mt19937_64 rng = TestRng();
  uint32_t n = 0;
  for (KernelOp op : {KernelOp::kForward, KernelOp::kBackward}) {
    for (KernelLayout layout : {KernelLayout::kChannelFirst, KernelLayout::kChannelLast}) {
      for (const Pair& pr : {kPairs[0], kPairs[1], kPairs[2], kPairs[4]}) {
        for (int W = 1; W <= 8; ++W) {
          for (int64_t L : {1, 8, 13, 64, 512, 1029, 2056}) {
            ++n;
            const int64_t D = n % 3 ? 8 : 5;
            const uint32_t bits = (n * 0x9e37u) >> 3 ^ n;
            const Conv1dProblem p = MakeProblem(op, pr, layout, D, W, bits);
            EXPECT_EQ(RunOneSegment(p, 1 + n % 3, L, rng), "");
          }
        }
      }
    }
  }
}

// The decode update at W = 1..8: one token with the minimal state (the
// vector path when D is a whole number of vectors) and several tokens with a
// longer state.
TEST(Conv1dGpuWidth, UpdateEveryFastWidth) {
  REQUIRE_DEVICE();
  std::mt19937_64 rng = TestRng();
  uint32_t n = 0;
  for (KernelLayout layout : {KernelLayout::kChannelFirst, KernelLayout::kChannelLast}) {
    for (const Pair& pr : kPairs) {
      for (int W = 1; W <= 8; ++W) {
        for (int64_t S : {1, 3}) {
          ++n;
          const Conv1dProblem p = MakeProblem(KernelOp::kUpdate, pr, layout, 16, W, n * 7);
          std::vector<SegmentData> segs(2);
          for (int i = 0; i < 2; ++i) {
            segs[i].batch = 1 + i;
            segs[i].seqlen = S;
            // The minimal state (at least one column) or a longer one.
            segs[i].state_len = std::max(W - 1, 1) + (S == 1 ? 0 : 2 + i);
            MakeInputs(p, &segs[i], rng);
          }
          ASSERT_EQ(RunFused(p, &segs), "") << Describe(p, segs);
          EXPECT_EQ(CheckAll(p, segs), "") << Describe(p, segs);
        }
      }
    }
  }
}

// Widths past the fast path, up to the limit, on every op and layout;
// lengths shorter and longer than the filter.
TEST(Conv1dGpuWidth, WideWidthsGeneralPath) {
  REQUIRE_DEVICE();
  std::mt19937_64 rng = TestRng();
  uint32_t n = 0;
  for (int W : {9, 16, 31, 64, 100, 128, 255, kernels::kMaxKernelWidth}) {
    for (KernelOp op : {KernelOp::kForward, KernelOp::kBackward}) {
      for (KernelLayout layout : {KernelLayout::kChannelFirst, KernelLayout::kChannelLast}) {
        for (int64_t L : {7, 300}) {
          ++n;
          const Pair pr = kPairs[n % 5];
          const Conv1dProblem p = MakeProblem(op, pr, layout, 3 + n % 4, W, n * 0x2bu);
          EXPECT_EQ(RunOneSegment(p, 2, L, rng), "");
        }
      }
    }
    for (KernelLayout layout : {KernelLayout::kChannelFirst, KernelLayout::kChannelLast}) {
      ++n;
      const Conv1dProblem p = MakeProblem(KernelOp::kUpdate, kPairs[n % 5], layout, 5, W, n);
      std::vector<SegmentData> segs(1);
      segs[0].batch = 2;
      segs[0].seqlen = 1 + n % 3;
      segs[0].state_len = W - 1 + n % 2;
      MakeInputs(p, &segs[0], rng);
      ASSERT_EQ(RunFused(p, &segs), "") << Describe(p, segs);
      EXPECT_EQ(CheckAll(p, segs), "") << Describe(p, segs);
    }
  }
}

// One fused launch of requests whose lengths are drawn from 1..4096 (every
// kind of tile in one launch), each with its own weights, B from 1 to 3.
TEST(Conv1dGpuWidth, RaggedMixedLengths) {
  REQUIRE_DEVICE();
  std::mt19937_64 rng = TestRng();
  std::uniform_int_distribution<int64_t> bdist(1, 3), ldist(1, 4096);
  for (KernelOp op : {KernelOp::kForward, KernelOp::kBackward}) {
    for (KernelLayout layout : {KernelLayout::kChannelFirst, KernelLayout::kChannelLast}) {
      for (Pair pr : {kPairs[0], kPairs[2]}) {
        for (int W : {4, 8}) {
          const Conv1dProblem p = MakeProblem(op, pr, layout, 24, W, 0x1f);
          std::vector<SegmentData> segs(24);
          for (size_t i = 0; i < segs.size(); ++i) {
            segs[i].batch = bdist(rng);
            // Every fourth a multiple of 8: the vector path in every dtype.
            const int64_t L = ldist(rng);
            segs[i].seqlen = i % 4 == 0 ? (L + 7) / 8 * 8 : L;
            MakeInputs(p, &segs[i], rng);
          }
          ASSERT_EQ(RunFused(p, &segs), "") << Describe(p, segs);
          EXPECT_EQ(CheckAll(p, segs), "") << Describe(p, segs);
        }
      }
    }
  }
}

// Conv1dWorkspaceBytes (sizes only) covers what the planner asks for with
// aligned and misaligned pointers, on every path; host only.
TEST(Conv1dHostWidth, WorkspaceQueryCoversThePlan) {
  std::mt19937_64 rng = TestRng();
  std::uniform_int_distribution<int64_t> bdist(1, 4), ldist(1, 5000);
  alignas(256) static char arena[1024];
  for (int W : {1, 2, 4, 5, 8, 9, 256}) {
    for (KernelLayout layout : {KernelLayout::kChannelFirst, KernelLayout::kChannelLast}) {
      for (const Pair& pr : kPairs) {
        const Conv1dProblem p = MakeProblem(KernelOp::kBackward, pr, layout, 40, W, 0x2);
        std::vector<kernels::Conv1dSegmentSize> sizes(9);
        for (auto& z : sizes) {
          z.batch = bdist(rng);
          z.seqlen = ldist(rng) / (rng() % 2 ? 1 : 64) + 1;
        }
        const int64_t query = kernels::Conv1dWorkspaceBytes(p, sizes.data(), 9);
        ASSERT_GE(query, 0);
        for (int offset : {0, 4, 2}) {
          std::vector<Conv1dSegment> table(9);
          for (size_t i = 0; i < table.size(); ++i) {
            table[i].batch = sizes[i].batch;
            table[i].seqlen = sizes[i].seqlen;
            for (int r = 0; r < kNumRoles; ++r) {
              table[i].set(RoleAt(r), arena + (i % 2 ? offset : 0) + 16 * r);
            }
          }
          kernels::Conv1dPlanInfo plan;
          ASSERT_EQ(kernels::Conv1dPlan(p, table.data(), 9, &plan), hipSuccess);
          EXPECT_GE(query, plan.workspace_bytes) << "W=" << W << " offset " << offset;
        }
      }
    }
  }
  kernels::Conv1dProblem fwd = MakeProblem(KernelOp::kForward, kPairs[0],
                                           KernelLayout::kChannelFirst, 8, 4, 0);
  const kernels::Conv1dSegmentSize one{2, 100, 0};
  EXPECT_EQ(kernels::Conv1dWorkspaceBytes(fwd, &one, 1), 0);
  const kernels::Conv1dSegmentSize bad{0, 100, 0};
  EXPECT_EQ(kernels::Conv1dWorkspaceBytes(fwd, &bad, 1), -1);
  fwd.width = kernels::kMaxKernelWidth + 1;
  EXPECT_EQ(kernels::Conv1dWorkspaceBytes(fwd, &one, 1), -1);
}

}  // namespace
}  // namespace conv1d::testing
