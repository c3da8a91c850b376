// The 16-bit walked rows (whole-vector and shifted rows) when a launch has
// many of them: in the backward (bwd_cf_walk_kernel) the planner gives a
// tile several consecutive channels (Conv1dSegment::channels_per_tile),
// never more steps than one walk takes; in the forward (fwd_cf_walk_kernel)
// several consecutive rows of one chunk each. The kernels walk them one
// after the other. The plan checks are pure host work; the launches match
// the float64 reference and separate launches (which group fewer or none)
// byte for byte, and skip themselves without a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <random>
#include <string>
#include <vector>

#include "tests/gpu/gpu_check.h"
#include "tests/gpu/gpu_harness.h"

namespace conv1d::testing {
namespace {

using kernels::KernelLayout;
using kernels::KernelOp;

// The most steps one walked channel takes (BwdWalkTraits::kSteps), and a
// tile of several (kTileSteps).
constexpr int64_t kWalkSteps = 128;
constexpr int64_t kTileSteps = 32;

// {B, L}: walked rows of 2 to 16 steps (two with a partial last step),
// batch rows 2, 3 and 8 (8 x 8 steps: a group the step cap halves), rows
// that are not a whole number of vectors (the shifted grid, each row of a
// segment at its own offset: one step, several, B = 2, one ending a
// vector short of its last step), and rows the walk does not take (short
// rows; 17 steps, two chunks).
const std::vector<std::array<int64_t, 2>> kShapes = {
    {1, 512}, {1, 264}, {2, 1024}, {1, 4096}, {1, 128}, {1, 2048},
    {8, 2048}, {1, 1536}, {1, 4104}, {3, 768}, {1, 3072}, {1, 520},
    {1, 1001}, {1, 37}, {2, 777}, {1, 4090}, {1, 250}};

// The forward's walk: rows of at most kFwdRowSteps steps.
constexpr int64_t kFwdRowSteps = 4;

// Each walked segment's tiles cover, in groups of channels_per_tile (a
// power of two), its channels (backward: a channel's rows hold at most one
// walk's steps, a group of several at most a tile's) or its B * D rows
// (forward: groups of at least 2, rows of one chunk of at most
// kFwdRowSteps steps, at most kTileSteps together); the walk range holds
// them; every other segment has one channel (row) per tile. Returns the
// largest group seen (0: none walked).
int64_t CheckGroups(const Conv1dProblem& p, const std::vector<Conv1dSegment>& table,
                    const kernels::Conv1dPlanInfo& plan) {
  const bool fwd = p.op == KernelOp::kForward;
  const int64_t ne = p.x_type == ScalarType::kF32 ? 4 : 8;
  int64_t largest = 0;
  for (size_t j = 0; j < table.size(); ++j) {
    const Conv1dSegment& s = table[j];
    const int64_t next = j + 1 < table.size() ? table[j + 1].tile_begin : plan.total_tiles;
    const std::string what = "B=" + std::to_string(s.batch) + " L=" + std::to_string(s.seqlen);
    const int64_t g = s.channels_per_tile;
    if (s.ws_partial_offset != kernels::kWsWalked) {
      EXPECT_EQ(g, 1) << what;
      continue;
    }
    // Shifted rows: up to ne - 1 more grid elements than L.
    const int64_t grid = s.vec == kernels::kVecShifted ? s.seqlen + ne - 1 : s.seqlen;
    const int64_t steps = ((grid + ne - 1) / ne + 31) / 32;
    EXPECT_TRUE(g >= (fwd ? 2 : 1) && (g & (g - 1)) == 0) << what << " channels_per_tile " << g;
    EXPECT_EQ(s.nchunks, 1) << what;
    EXPECT_TRUE(s.tile_begin >= plan.walk_tile_begin && next <= plan.walk_tile_end) << what;
    if (fwd) {
      EXPECT_LE(steps, kFwdRowSteps) << what;
      EXPECT_LE(g * steps, kTileSteps) << what;
      EXPECT_EQ(next - s.tile_begin, (s.batch * p.dim + g - 1) / g) << what;
    } else {
      EXPECT_LE(s.batch * steps, kWalkSteps) << what;
      if (g > 1) {
        EXPECT_LE(g * s.batch * steps, kTileSteps) << what;
      }
      EXPECT_EQ(next - s.tile_begin, (p.dim + g - 1) / g) << what;
    }
    largest = std::max(largest, g);
  }
  return largest;
}

TEST(Conv1dWalk, ManyWalkedChannelsAreGroupedWithinATilesSteps) {
  for (const Pair& pr : {kPairs[2], kPairs[1], kPairs[0]}) {
    const bool walks = pr.x != ScalarType::kF32;
    // D = 1031: a last group of fewer channels.
    const Conv1dProblem p = MakeProblem(KernelOp::kBackward, pr, KernelLayout::kChannelFirst, 1031, 4, 0x3);
    std::vector<Conv1dSegment> table;
    const kernels::Conv1dPlanInfo plan = PlanShapes(p, kShapes, &table);
    const int64_t largest = CheckGroups(p, table, plan);
    EXPECT_EQ(largest > 1, walks) << "largest channels_per_tile " << largest;
    if (walks) {
      EXPECT_GT(plan.walk_tile_end, plan.walk_tile_begin);
    }
    // Few channels in all: a channel per tile.
    const Conv1dProblem few = MakeProblem(KernelOp::kBackward, pr, KernelLayout::kChannelFirst, 40, 4, 0x3);
    EXPECT_EQ(CheckGroups(few, table, PlanShapes(few, kShapes, &table)), walks ? 1 : 0);
  }
}

// Grouped walks against the reference and against the same segments alone
// (a launch of one segment groups fewer channels, or none): bf16 and fp16
// weights, fp32 weights, SiLU, bias, every state tensor, W = 2..4.
TEST(Conv1dWalk, GroupedChannelsMatchTheReferenceAndSeparateLaunches) {
  REQUIRE_DEVICE();
  std::mt19937_64 rng = TestRng();
  const FeatureCase cases[] = {{kPairs[2], 4, 0x1f}, {kPairs[1], 3, 0x02}, {kPairs[4], 2, 0x3d}, {kPairs[2], 4, 0x00}};
  for (const FeatureCase& c : cases) {
    const Conv1dProblem p = MakeProblem(KernelOp::kBackward, c.pr, KernelLayout::kChannelFirst, 1031, c.W, c.bits);
    std::vector<Conv1dSegment> table;
    ASSERT_GT(CheckGroups(p, table, PlanShapes(p, kShapes, &table)), 1) << "the launch groups no channels";
    ASSERT_NO_FATAL_FAILURE(ExpectFusedEqualSeparate(p, MakeSegments(p, kShapes, rng), {1, 3, 9, 12, 14}));
  }
}

// {B, L} for the forward: rows of 1 to 4 steps, whole vectors and shifted
// (37: one step on the grid; 1001: four), and rows the walk does not take:
// longer rows (4089: 16 steps; 4090 and 8192, two chunks) and short rows.
const std::vector<std::array<int64_t, 2>> kFwdShapes = {
    {1, 264}, {2, 37}, {1, 1001}, {1, 520}, {3, 250}, {1, 4090},
    {2, 777}, {1, 4089}, {1, 1024}, {1, 8192}, {2, 128}, {1, 40}};

TEST(Conv1dWalk, ForwardRowsOfOneChunkAreGroupedWhenALaunchHasMany) {
  for (const Pair& pr : {kPairs[2], kPairs[1], kPairs[0]}) {
    const bool walks = pr.x != ScalarType::kF32;
    // D = 4099: a last group of fewer rows in every segment of B = 1.
    const Conv1dProblem p = MakeProblem(KernelOp::kForward, pr, KernelLayout::kChannelFirst, 4099, 4, 0x3);
    std::vector<Conv1dSegment> table;
    const kernels::Conv1dPlanInfo plan = PlanShapes(p, kFwdShapes, &table);
    const int64_t largest = CheckGroups(p, table, plan);
    EXPECT_EQ(largest >= 4, walks) << "largest channels_per_tile " << largest;
    EXPECT_EQ(plan.walk_tile_end > plan.walk_tile_begin, walks);
    // Few rows in all: none walked, the stream kernel's tiles as before.
    const Conv1dProblem few = MakeProblem(KernelOp::kForward, pr, KernelLayout::kChannelFirst, 64, 4, 0x3);
    EXPECT_EQ(CheckGroups(few, table, PlanShapes(few, kFwdShapes, &table)), 0);
  }
}

// Walked forward rows against the reference and against the same segments
// alone (a launch of one segment walks none): bf16 and fp16 weights, fp32
// weights, SiLU, bias, initial and final states, W = 2..8.
TEST(Conv1dWalk, ForwardGroupedRowsMatchTheReferenceAndSeparateLaunches) {
  REQUIRE_DEVICE();
  std::mt19937_64 rng = TestRng();
  const FeatureCase cases[] = {{kPairs[2], 4, 0x0f}, {kPairs[1], 3, 0x02}, {kPairs[4], 2, 0x0d},
                               {kPairs[2], 8, 0x00}, {kPairs[3], 6, 0x0e}};
  for (const FeatureCase& c : cases) {
    const Conv1dProblem p = MakeProblem(KernelOp::kForward, c.pr, KernelLayout::kChannelFirst, 4099, c.W, c.bits);
    std::vector<Conv1dSegment> table;
    ASSERT_GE(CheckGroups(p, table, PlanShapes(p, kFwdShapes, &table)), 2) << "the launch walks no rows";
    ASSERT_NO_FATAL_FAILURE(ExpectFusedEqualSeparate(p, MakeSegments(p, kFwdShapes, rng), {0, 1, 2, 7}));
  }
}

}  // namespace
}  // namespace conv1d::testing
