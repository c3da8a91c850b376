// Conv1dPlan's ordering of the segment table by kernel family: in a launch
// of mixed lengths every family's tiles form one contiguous range, the
// ranges do not overlap and cover every tile, each segment keeps its
// tensors, and source_index maps back to the caller's order. Pure host
// work: runs without a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "tests/gpu/gpu_check.h"
#include "tests/gpu/gpu_harness.h"

namespace conv1d::testing {
namespace {

using kernels::KernelLayout;
using kernels::KernelOp;

TEST(Conv1dPlanOrder, FamiliesGetDisjointContiguousRanges) {
  alignas(256) static char arena[1 << 12];
  std::mt19937_64 rng(7);
  // Short vector rows, long vector rows, rows of other lengths (shifted or
  // scalar), in every order.
  const int64_t lengths[] = {8, 1000, 1001, 64, 33, 4096, 5, 2048, 129, 16};
  for (KernelOp op : {KernelOp::kForward, KernelOp::kBackward}) {
    for (const Pair& pr : {kPairs[0], kPairs[2]}) {
      const Conv1dProblem p = MakeProblem(op, pr, KernelLayout::kChannelFirst, 8, 4, 0x3);
      for (int trial = 0; trial < 20; ++trial) {
        const int n = 10;
        std::vector<Conv1dSegment> table(n);
        for (int i = 0; i < n; ++i) {
          table[i].batch = 1 + static_cast<int64_t>(rng() % 3);
          table[i].seqlen = lengths[rng() % std::size(lengths)];
          for (int r = 0; r < kNumRoles; ++r) {
            table[i].set(RoleAt(r), arena + 256 * i + 16 * r);
          }
        }
        const std::vector<Conv1dSegment> given = table;
        kernels::Conv1dPlanInfo plan;
        ASSERT_EQ(kernels::Conv1dPlan(p, table.data(), n, &plan), hipSuccess);
        std::vector<bool> seen(n, false);
        for (int j = 0; j < n; ++j) {
          const int64_t src = table[j].source_index;
          ASSERT_TRUE(src >= 0 && src < n && !seen[src]) << "source_index " << src;
          seen[src] = true;
          EXPECT_EQ(table[j].in(Role::kX), given[src].in(Role::kX));
          EXPECT_EQ(table[j].seqlen, given[src].seqlen);
          if (j > 0) {
            EXPECT_LE(table[j - 1].tile_begin, table[j].tile_begin);
          }
        }
        struct Range {
          int64_t b, e;
        };
        std::vector<Range> ranges;
        for (Range r : {Range{plan.long_tile_begin, plan.long_tile_end},
                        Range{plan.short_tile_begin, plan.short_tile_end},
                        Range{plan.stream_tile_begin, plan.stream_tile_end},
                        Range{plan.walk_tile_begin, plan.walk_tile_end}}) {
          if (r.e > r.b) ranges.push_back(r);
        }
        std::sort(ranges.begin(), ranges.end(), [](Range a, Range b) { return a.b < b.b; });
        int64_t covered = 0;
        for (size_t k = 0; k < ranges.size(); ++k) {
          if (k > 0) {
            EXPECT_LE(ranges[k - 1].e, ranges[k].b) << "family ranges overlap";
          }
          covered += ranges[k].e - ranges[k].b;
        }
        EXPECT_EQ(covered, plan.total_tiles);
      }
    }
  }
}

// The backward's long vector rows go to the stream kernel's range at every
// fast width (fp32 past W = 5: the halo from two lanes), or, 16-bit rows
// this short, to the walk range; none to the scalar kernel's.
TEST(Conv1dPlanOrder, BackwardLongRowsGoToTheStreamKernelAtEveryWidth) {
  alignas(256) static char arena[1 << 12];
  for (const Pair& pr : {kPairs[0], kPairs[2]}) {
    for (int W = 2; W <= 8; ++W) {
      const Conv1dProblem p =
          MakeProblem(KernelOp::kBackward, pr, KernelLayout::kChannelFirst, 8, W, 0x3);
      Conv1dSegment s;
      s.batch = 2;
      s.seqlen = 4096;
      for (int r = 0; r < kNumRoles; ++r) s.set(RoleAt(r), arena + 16 * r);
      kernels::Conv1dPlanInfo plan;
      ASSERT_EQ(kernels::Conv1dPlan(p, &s, 1, &plan), hipSuccess);
      const bool walk = pr.x != kernels::ScalarType::kF32;
      EXPECT_EQ(s.vec, 1) << "W=" << W;
      EXPECT_EQ(plan.stream_tile_end - plan.stream_tile_begin, walk ? 0 : plan.total_tiles)
          << "W=" << W;
      EXPECT_EQ(plan.walk_tile_end - plan.walk_tile_begin, walk ? plan.total_tiles : 0)
          << "W=" << W;
      EXPECT_EQ(plan.long_tile_end - plan.long_tile_begin, 0) << "W=" << W;
      EXPECT_GT(plan.total_tiles, 0);
    }
  }
}

// Long backward rows whose channel's dweight one tile holds (B == 1, one
// chunk) have no partials: the stream kernel stores dweight itself
// (kWsDirect) and, with no other partials, the launch needs no reduction
// and no workspace; 16-bit rows of that kind are walked (kWsWalked),
// whole-vector and shifted ones alike. Two batch rows or two chunks keep
// their partials.
TEST(Conv1dPlanOrder, SingleChunkRowsOfOneBatchRowStoreDweightDirectly) {
  alignas(256) static char arena[1 << 12];
  struct Case {
    int pair;
    int64_t B, L;
    int64_t ws;  // expected ws_partial_offset: kWsDirect, kWsWalked or 0 (partials)
  };
  const Case cases[] = {{0, 1, 4096, kernels::kWsDirect},  {0, 1, 4093, kernels::kWsDirect},
                        {0, 2, 4096, 0},                    {0, 1, 8192, 0},
                        {2, 1, 4001, kernels::kWsWalked},  {2, 1, 4096, kernels::kWsWalked},
                        {2, 1, 8192, 0}};
  for (const Case& c : cases) {
    const Conv1dProblem p =
        MakeProblem(KernelOp::kBackward, kPairs[c.pair], KernelLayout::kChannelFirst, 8, 4, 0x3);
    Conv1dSegment s;
    s.batch = c.B;
    s.seqlen = c.L;
    for (int r = 0; r < kNumRoles; ++r) s.set(RoleAt(r), arena + 16 * r);
    kernels::Conv1dPlanInfo plan;
    ASSERT_EQ(kernels::Conv1dPlan(p, &s, 1, &plan), hipSuccess);
    const std::string what = "pair " + std::to_string(c.pair) + " B=" + std::to_string(c.B) +
                             " L=" + std::to_string(c.L);
    EXPECT_EQ(s.ws_partial_offset, c.ws) << what;
    EXPECT_EQ(plan.reduce_dw, c.ws < 0 ? 0 : 1) << what;
    EXPECT_EQ(plan.workspace_bytes == 0, c.ws < 0) << what;
  }
}

}  // namespace
}  // namespace conv1d::testing
