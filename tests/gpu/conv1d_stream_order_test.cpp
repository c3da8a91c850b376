// A launch of several kernel families is one step of its stream: on CUDA
// each family after the first (and the dweight reduction) is a dependent
// launch that may start while the one before it still runs (LaunchKernel,
// kernels/conv1d_device.h). Whatever the stream does next must still find
// every kernel of the launch finished. Here every output is poisoned
// before each launch and copied back after it, in stream order with no host
// wait between repeats: every repeat must match the float64 reference and
// the first repeat byte for byte. Batches mix every channel-first row kind,
// once with the short rows and once with the streamed long rows outlasting
// the rest. Skips itself without a device.
#include <gtest/gtest.h>

#include <array>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "tests/gpu/gpu_check.h"
#include "tests/gpu/gpu_harness.h"

namespace conv1d::testing {
namespace {

using kernels::KernelLayout;
using kernels::KernelOp;

// One segment that takes longer than all the others: many short rows, or
// long rows on the stream kernels.
const std::array<int64_t, 2> kLongest[] = {{160, 128}, {4, 65536}};

// The outputs a launch writes, by name.
constexpr std::pair<const char*, HostTensor SegmentData::*> kOutputs[] = {
    {"y", &SegmentData::y},         {"final_states", &SegmentData::final_states},
    {"dx", &SegmentData::dx},       {"dweight", &SegmentData::dweight},
    {"dbias", &SegmentData::dbias}, {"dinitial_states", &SegmentData::dinit}};

// The first output of `got` that differs from `want` in any byte, by name
// and segment; "" when none does.
std::string FirstDifference(const std::vector<SegmentData>& want,
                            const std::vector<SegmentData>& got) {
  for (size_t i = 0; i < want.size(); ++i) {
    for (const auto& [name, member] : kOutputs) {
      if ((want[i].*member).bytes != (got[i].*member).bytes) {
        return std::string(name) + " of segment " + std::to_string(i);
      }
    }
  }
  return "";
}

TEST(Conv1dGpuStreamOrder, EveryRepeatOfAManyFamilyLaunchIsComplete) {
  REQUIRE_DEVICE();
  std::mt19937_64 rng = TestRng();
  constexpr int kRepeats = 6;
  for (KernelOp op : {KernelOp::kForward, KernelOp::kBackward}) {
    for (const Pair& pr : {kPairs[0], kPairs[2]}) {
      const Conv1dProblem p = MakeProblem(op, pr, KernelLayout::kChannelFirst, 72, 4, 0x1f);
      for (const auto& longest : kLongest) {
        std::vector<SegmentData> segs;
        for (const auto& shape : kRowKinds) {
          SegmentData s;
          s.batch = shape[0];
          s.seqlen = shape[1];
          segs.push_back(std::move(s));
        }
        SegmentData big;
        big.batch = longest[0];
        big.seqlen = longest[1];
        segs.push_back(std::move(big));
        for (auto& s : segs) MakeInputs(p, &s, rng);
        std::vector<std::vector<SegmentData>> runs;
        const std::string err = RunFusedInStreamOrder(p, segs, kRepeats, &runs);
        ASSERT_EQ(err, "") << Describe(p, segs);
        ASSERT_EQ(runs.size(), static_cast<size_t>(kRepeats));
        ASSERT_EQ(CheckAll(p, runs[0]), "") << Describe(p, segs);
        for (int r = 1; r < kRepeats; ++r) {
          EXPECT_EQ(FirstDifference(runs[0], runs[r]), "")
              << "repeat " << r << " of " << Describe(p, segs);
        }
      }
    }
  }
}

}  // namespace
}  // namespace conv1d::testing
