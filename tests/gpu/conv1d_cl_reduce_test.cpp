// GPU kernel tests of the channel-last backward's own reduction: a launch
// whose blocks are all resident at once (one wave) sums its dweight/dbias
// partials itself after a grid barrier; a longer launch leaves them to
// reduce_dw_kernel. Each segment below fits one wave alone and shares a
// launch of more than one wave with a large segment; both runs match the
// float64 reference and give the same bytes; so does a launch the runtime
// refuses to make cooperative. Skip without a device.
#include <gtest/gtest.h>

#include <array>
#include <random>
#include <vector>

#include "kernels/conv1d_internal.h"
#include "tests/gpu/gpu_check.h"
#include "tests/gpu/gpu_harness.h"

namespace conv1d::testing {
namespace {

using kernels::KernelLayout;
using kernels::KernelOp;

int64_t CooperativeResident(const Conv1dProblem& p) {
  return kernels::detail::ResidentBlocks(kernels::detail::ResidentKernel::kBwdClCooperative, p.x_type, p.width);
}

// While alive, this thread's cooperative channel-last count for p's type
// and width reads `blocks`; `before` is what it read.
struct RaisedResidentCount {
  RaisedResidentCount(const Conv1dProblem& p, int64_t blocks)
      : type(p.x_type), width(p.width),
        before(kernels::detail::SetResidentBlocksForTesting(kKernel, type, width, blocks)) {}
  ~RaisedResidentCount() { kernels::detail::SetResidentBlocksForTesting(kKernel, type, width, before); }
  static constexpr auto kKernel = kernels::detail::ResidentKernel::kBwdClCooperative;
  const ScalarType type;
  const int32_t width;
  const int64_t before;
};

// Channel blocks of 32 vectors (4 channels each on the vector path, one on
// the scalar path); a tile is 8 x 64 steps of one row.
int64_t ChannelBlocks(int64_t D) { return D % 4 == 0 ? (D / 4 + 31) / 32 : (D + 31) / 32; }

TEST(Conv1dClReduce, OneWaveSumsItsOwnPartialsAsTheSecondLaunchDoes) {
  REQUIRE_DEVICE();
  std::mt19937_64 rng = TestRng();
  // Every state feature, SiLU and bias; D = 8 (the vector path) and 37 (the
  // scalar path, two channel blocks).
  const FeatureCase cases[] = {{kPairs[0], 4, 0x1f}, {kPairs[2], 4, 0x1f}, {kPairs[4], 3, 0x1b},
                               {kPairs[1], 2, 0x17}, {kPairs[0], 5, 0x03}};
  for (const auto& c : cases) {
    for (int64_t D : {8, 37}) {
      const Conv1dProblem p = MakeProblem(KernelOp::kBackward, c.pr, KernelLayout::kChannelLast, D, c.W, c.bits);
      const int64_t resident = CooperativeResident(p);
      // (B, L): one or two partials per channel, 3 x 2, 13 x 2 (past the
      // in-order limit of 12: a team's butterfly), a row shorter than W,
      // a row ending inside a thread's walk; last, rows of one tile each,
      // more than one wave of them.
      const int64_t big = resident > 0 ? resident + 5 : 300;
      const std::vector<std::array<int64_t, 2>> shapes = {
          {1, 1000}, {3, 700}, {13, 600}, {1, 2}, {2, 2051}, {(big + ChannelBlocks(D) - 1) / ChannelBlocks(D), 300}};
      std::vector<Conv1dSegment> table;
      const kernels::Conv1dPlanInfo all = PlanShapes(p, shapes, &table);
      if (resident > 0) {
        ASSERT_GT(all.total_tiles, resident);
        for (size_t i = 0; i + 1 < shapes.size(); ++i) {
          ASSERT_LE(PlanShapes(p, {shapes[i]}, &table).total_tiles, resident) << "segment " << i;
        }
      }
      const std::vector<SegmentData> segs = MakeSegments(p, shapes, rng);
      ASSERT_NO_FATAL_FAILURE(ExpectFusedEqualSeparate(p, segs, EveryNth(segs.size() - 1, 1)));
    }
  }
}

// With enough channels (D = 16384) and few partials each, the reduction
// takes a lane per channel, in one wave as in two launches.
TEST(Conv1dClReduce, LaneModeInOneWave) {
  REQUIRE_DEVICE();
  std::mt19937_64 rng = TestRng();
  for (const Pair& pr : {kPairs[0], kPairs[2]}) {
    const Conv1dProblem p = MakeProblem(KernelOp::kBackward, pr, KernelLayout::kChannelLast, 16384, 4, 0x03);
    const int64_t resident = CooperativeResident(p);
    // 128 channel blocks: one chunk of 512 steps (L = 100) is 128 tiles;
    // the second row takes one chunk more than one wave holds.
    const int64_t chunks = (resident > 0 ? resident / 128 : 2) + 1;
    const std::vector<std::array<int64_t, 2>> shapes = {{1, 100}, {1, 512 * (chunks - 1) + 100}};
    std::vector<Conv1dSegment> table;
    if (resident >= 128) {
      ASSERT_LE(PlanShapes(p, {shapes[0]}, &table).total_tiles, resident);
      ASSERT_GT(PlanShapes(p, shapes, &table).total_tiles, resident);
    }
    const std::vector<SegmentData> segs = MakeSegments(p, shapes, rng);
    ASSERT_NO_FATAL_FAILURE(ExpectFusedEqualSeparate(p, segs, {0}));
  }
}

// A launch that the occupancy query says fits one wave but the device does
// not hold (as on a device shared under a limit on its multiprocessors):
// the runtime refuses the cooperative launch and the launcher takes the
// two-launch path. The query's answer for this thread is raised above the
// device's capacity for the test; the segment alone and the fused launch
// both exceed the real capacity, so both are refused, and both must still
// match the float64 reference and each other byte for byte. (A runtime
// that accepted such a launch would hang at the grid barrier.)
TEST(Conv1dClReduce, RefusedCooperativeLaunchTakesTheTwoLaunchPath) {
  REQUIRE_DEVICE();
  std::mt19937_64 rng = TestRng();
  for (const Pair& pr : {kPairs[0], kPairs[2]}) {
    for (int64_t D : {8, 37}) {
      const Conv1dProblem p = MakeProblem(KernelOp::kBackward, pr, KernelLayout::kChannelLast, D, 4, 0x1f);
      const int64_t resident = CooperativeResident(p);
      if (resident <= 0) GTEST_SKIP() << "the device cannot launch cooperatively";
      const int64_t big = resident + 5;
      const std::vector<std::array<int64_t, 2>> shapes = {{3, 700},
                                                          {(big + ChannelBlocks(D) - 1) / ChannelBlocks(D), 300}};
      std::vector<Conv1dSegment> table;
      ASSERT_GT(PlanShapes(p, {shapes[1]}, &table).total_tiles, resident);
      const std::vector<SegmentData> segs = MakeSegments(p, shapes, rng);
      {
        const RaisedResidentCount raised(p, int64_t{1} << 40);
        ASSERT_EQ(raised.before, resident);
        ASSERT_NO_FATAL_FAILURE(ExpectFusedEqualSeparate(p, segs, {0, 1}));
      }
      ASSERT_EQ(CooperativeResident(p), resident);
    }
  }
}

}  // namespace
}  // namespace conv1d::testing
