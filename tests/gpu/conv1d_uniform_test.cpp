// A fused batch of one shape: the planner reports the tiles each segment
// owns (Conv1dPlanInfo::uniform_tiles) when they are all equal, and the
// kernels then find a tile's segment by division instead of searching the
// table. The plan checks are pure host work; the launches (every kernel
// family, both layouts, fp32 and bf16) match the float64 reference and
// separate launches byte for byte, and skip themselves without a device.
#include <gtest/gtest.h>

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

TEST(Conv1dPlanUniform, OneShapeGivesEachSegmentsTiles) {
  for (KernelOp op : {KernelOp::kForward, KernelOp::kBackward}) {
    for (KernelLayout layout : {KernelLayout::kChannelFirst, KernelLayout::kChannelLast}) {
      for (const Pair& pr : {kPairs[0], kPairs[2]}) {
        const Conv1dProblem p = MakeProblem(op, pr, layout, 64, 4, 0x3);
        for (const auto& shape : kRowKinds) {
          std::vector<Conv1dSegment> table;
          const kernels::Conv1dPlanInfo plan =
              PlanShapes(p, std::vector<std::array<int64_t, 2>>(12, shape), &table);
          const std::string what = "op " + std::to_string(static_cast<int>(op)) + " layout " +
                                   std::to_string(static_cast<int>(layout)) + " B=" +
                                   std::to_string(shape[0]) + " L=" + std::to_string(shape[1]);
          ASSERT_GT(plan.total_tiles, 0) << what;
          ASSERT_EQ(plan.total_tiles % 12, 0) << what;
          EXPECT_EQ(plan.uniform_tiles, plan.total_tiles / 12) << what;
          for (int j = 0; j < 12; ++j) EXPECT_EQ(table[j].tile_begin, j * plan.uniform_tiles) << what;
        }
      }
    }
  }
}

TEST(Conv1dPlanUniform, MixedShapesOrOneDifferentSegmentGiveNone) {
  const Conv1dProblem p =
      MakeProblem(KernelOp::kForward, kPairs[0], KernelLayout::kChannelFirst, 64, 4, 0x3);
  std::vector<Conv1dSegment> table;
  std::vector<std::array<int64_t, 2>> shapes(12, std::array<int64_t, 2>{1, 128});
  shapes[7] = {2, 128};  // twice the rows: twice the tiles
  EXPECT_EQ(PlanShapes(p, shapes, &table).uniform_tiles, 0);
  shapes.assign(std::begin(kRowKinds), std::end(kRowKinds));
  EXPECT_EQ(PlanShapes(p, shapes, &table).uniform_tiles, 0);
  // One segment is always uniform.
  shapes.assign(1, std::array<int64_t, 2>{3, 77});
  const kernels::Conv1dPlanInfo one = PlanShapes(p, shapes, &table);
  EXPECT_EQ(one.uniform_tiles, one.total_tiles);
}

// Every shape of kRowKinds as a batch of its own (random data and weights per
// request), forward and backward, both layouts, fp32 and bf16 with states
// in and out: the reference, and the first and last request alone give the
// same bytes.
TEST(Conv1dGpuUniform, OneShapeBatchesMatchSeparateLaunches) {
  REQUIRE_DEVICE();
  std::mt19937_64 rng = TestRng();
  for (KernelOp op : {KernelOp::kForward, KernelOp::kBackward}) {
    for (KernelLayout layout : {KernelLayout::kChannelFirst, KernelLayout::kChannelLast}) {
      for (const Pair& pr : {kPairs[0], kPairs[2]}) {
        const Conv1dProblem p = MakeProblem(op, pr, layout, 72, 4, 0x1f);
        for (const auto& shape : kRowKinds) {
          const int n = shape[1] >= 1000 ? 5 : 24;
          std::vector<SegmentData> segs(static_cast<size_t>(n));
          for (auto& s : segs) {
            s.batch = shape[0];
            s.seqlen = shape[1];
            MakeInputs(p, &s, rng);
          }
          ASSERT_NO_FATAL_FAILURE(
              ExpectFusedEqualSeparate(p, segs, {0, static_cast<size_t>(n - 1)}));
        }
      }
    }
  }
}

}  // namespace
}  // namespace conv1d::testing
