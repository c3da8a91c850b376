// The channel-last forward's steps per thread (ClFwdSteps): in 16-bit
// types lengthened so that a launch of a little more than whole waves of
// resident blocks fits the waves below, never past twice the default; fp32
// keeps the default. Launches planned that way on this device match the
// float64 reference (rows ending inside a thread's walk, states in and
// out, every 16-bit dtype pair).
#include <gtest/gtest.h>

#include <array>
#include <random>
#include <vector>

#include "kernels/conv1d_layout.h"
#include "tests/gpu/gpu_check.h"
#include "tests/gpu/gpu_harness.h"

namespace conv1d::testing {
namespace {

using kernels::KernelLayout;
using kernels::KernelOp;

Conv1dSegment Rows(int64_t B, int64_t L) {
  Conv1dSegment s;
  s.batch = B;
  s.seqlen = L;
  return s;
}

TEST(Conv1dClWaves, StepsFillTheWholeWavesBelow) {
  // 16-bit types walk 4-channel vectors, 32 steps by default: a tile is
  // 128 channels by 256 steps.
  for (const Pair& pr : {kPairs[1], kPairs[2], kPairs[4]}) {
    const Conv1dProblem p = MakeProblem(KernelOp::kForward, pr, KernelLayout::kChannelLast, 2048, 4, 0);
    const Conv1dSegment s = Rows(4, 2048);  // 4 x 16 x 8 = 512 tiles at 32 steps
    // 396 resident (132 x 3): 512 tiles are 1.3 waves; at 43 steps a row
    // takes 6 time blocks (6 x 344 >= 2048; 42 steps would need 7), 384
    // tiles in one wave.
    EXPECT_EQ(kernels::detail::ClFwdSteps(p, &s, 1, 396), 43);
    // Exactly one wave, less than one, or no count: the default.
    EXPECT_EQ(kernels::detail::ClFwdSteps(p, &s, 1, 512), 32);
    EXPECT_EQ(kernels::detail::ClFwdSteps(p, &s, 1, 600), 32);
    EXPECT_EQ(kernels::detail::ClFwdSteps(p, &s, 1, 0), 32);
    // 100 resident: 5.12 waves; 5 waves hold 500 tiles, 7 time blocks a
    // row: 256 / 7 -> 37 steps (36 would leave 8 blocks).
    EXPECT_EQ(kernels::detail::ClFwdSteps(p, &s, 1, 100), 37);
    // 260 resident: 1.97 waves; one wave of 260 needs 4 time blocks a row
    // (4 x 8 x 64 = 2048), 64 steps: the most allowed.
    EXPECT_EQ(kernels::detail::ClFwdSteps(p, &s, 1, 260), 64);
    // L = 2304: 9 time blocks at 32 steps (576 tiles), 5 at 64 (320). With
    // 300 resident one wave would need 4 (72 steps): the default stays;
    // with 330, 5 time blocks: 2304 / 40 -> 58 steps.
    const Conv1dSegment odd = Rows(4, 2304);
    EXPECT_EQ(kernels::detail::ClFwdSteps(p, &odd, 1, 300), 32);
    EXPECT_EQ(kernels::detail::ClFwdSteps(p, &odd, 1, 330), 58);
    // Several segments count together: 2 x 256 tiles as one launch.
    const Conv1dSegment two[] = {Rows(2, 2048), Rows(2, 2048)};
    EXPECT_EQ(kernels::detail::ClFwdSteps(p, two, 2, 396), 43);
  }
  const Conv1dProblem f32 = MakeProblem(KernelOp::kForward, kPairs[0], KernelLayout::kChannelLast, 2048, 4, 0);
  const Conv1dSegment s = Rows(4, 2048);
  EXPECT_EQ(kernels::detail::ClFwdSteps(f32, &s, 1, 396), 32);
}

TEST(Conv1dClWaves, LengthenedStepsMatchTheReference) {
  REQUIRE_DEVICE();
  std::mt19937_64 rng = TestRng();
  const FeatureCase cases[] = {{kPairs[2], 4, 0x0f}, {kPairs[1], 4, 0x0d}, {kPairs[3], 3, 0x0e}, {kPairs[4], 2, 0x07}};
  for (const auto& c : cases) {
    // D = 8: one channel block, so a row of L takes ceil(L / 256) tiles at
    // the default; L for about 1.3 waves of this device's resident blocks.
    const Conv1dProblem p = MakeProblem(KernelOp::kForward, c.pr, KernelLayout::kChannelLast, 8, c.W, c.bits);
    const int64_t resident = kernels::detail::FwdClResidentBlocks(p);
    ASSERT_GT(resident, 0);
    const int64_t L = 256 * (resident + resident / 3) - 37;
    std::vector<Conv1dSegment> table;
    const kernels::Conv1dPlanInfo plan = PlanShapes(p, {{1, L}}, &table);
    EXPECT_GT(table[0].per_lane, 32) << "resident " << resident;
    EXPECT_LE(table[0].per_lane, 64);
    EXPECT_LE(plan.total_tiles, resident);
    EXPECT_EQ(RunOneSegment(p, 1, L, rng), "");
    EXPECT_EQ(RunOneSegment(p, 2, L / 2 + 3, rng), "");
  }
}

}  // namespace
}  // namespace conv1d::testing
