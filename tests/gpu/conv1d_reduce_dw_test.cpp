// GPU kernel tests of the backward's dweight/dbias reduction
// (reduce_dw_kernel): one fused launch whose segments have from one to
// dozens of partials per channel (channels of few partials summed by one
// lane in order, the others by a team), against the float64 reference; and
// each segment run alone, where the launch may take the kernel's other
// mode, gives the same bytes. Skip without a device.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "tests/gpu/gpu_check.h"
#include "tests/gpu/gpu_harness.h"

namespace conv1d::testing {
namespace {

using kernels::KernelLayout;
using kernels::KernelOp;

struct Shape {
  int64_t batch, seqlen;
};

// (B, L): short rows (B partials, or none: stored directly), long rows of a
// few chunks, counts either side of the kernel's in-order limit (12) and
// of a team (32), and many.
constexpr Shape kShapes[] = {{1, 100}, {3, 64},   {1, 4096}, {4, 4096}, {33, 64},
                             {5, 4136}, {2, 2051}, {9, 3000}, {1, 1},    {40, 700}};

TEST(Conv1dReduceDw, FewAndManyPartialsPerChannelInOneLaunch) {
  REQUIRE_DEVICE();
  std::mt19937_64 rng = TestRng();
  for (const Pair& pr : {kPairs[0], kPairs[2], kPairs[4]}) {
    for (int W : {2, 4}) {
      // SiLU and bias; D = 37 puts a segment's channels across team edges.
      const Conv1dProblem p =
          MakeProblem(KernelOp::kBackward, pr, KernelLayout::kChannelFirst, 37, W, 0x03);
      std::vector<SegmentData> segs(std::size(kShapes));
      for (size_t i = 0; i < segs.size(); ++i) {
        segs[i].batch = kShapes[i].batch;
        segs[i].seqlen = kShapes[i].seqlen;
        MakeInputs(p, &segs[i], rng);
      }
      ASSERT_NO_FATAL_FAILURE(ExpectFusedEqualSeparate(p, segs, EveryNth(segs.size(), 1)));
    }
  }
}

// With enough channels (D = 16384) a launch whose channels all have few
// partials sums each in one lane; fused with a segment of more partials it
// sums them by a team. Both give the same bytes.
TEST(Conv1dReduceDw, LaneAndTeamModesGiveTheSameBytes) {
  REQUIRE_DEVICE();
  std::mt19937_64 rng = TestRng();
  for (const Pair& pr : {kPairs[0], kPairs[2]}) {
    const Conv1dProblem p =
        MakeProblem(KernelOp::kBackward, pr, KernelLayout::kChannelFirst, 16384, 4, 0x03);
    // A few partials per channel (two chunks of a long row); then 17 short
    // rows per channel: 17 partials.
    std::vector<SegmentData> segs(2);
    segs[0].batch = 1;
    segs[0].seqlen = 700;
    segs[1].batch = 17;
    segs[1].seqlen = 64;
    for (SegmentData& s : segs) MakeInputs(p, &s, rng);
    // Segment 0 alone: the lane mode.
    ASSERT_NO_FATAL_FAILURE(ExpectFusedEqualSeparate(p, segs, {0}));
  }
}

}  // namespace
}  // namespace conv1d::testing
