// Checks shared by the GPU kernel tests: the dtype pairs under test, a
// problem from feature bits, segments of given shapes with random inputs,
// every output of a fused launch against the float64 reference, a fused
// launch against its segments run alone, the plan of given shapes (host
// only), and the random generator whose seed a test prints and a run may
// fix (CONV1D_TEST_SEED) to replay a failure.
//
// Used by tests/gpu only. Not thread-safe (call from the test's thread).
#ifndef CONV1D_TESTS_GPU_GPU_CHECK_H_
#define CONV1D_TESTS_GPU_GPU_CHECK_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tests/gpu/gpu_harness.h"
#include "tests/common/reference.h"

namespace conv1d::testing {

// An activation dtype and a weight dtype.
struct Pair {
  ScalarType x, w;
};
inline constexpr Pair kPairs[] = {{ScalarType::kF32, ScalarType::kF32},
                                  {ScalarType::kF16, ScalarType::kF16},
                                  {ScalarType::kBF16, ScalarType::kBF16},
                                  {ScalarType::kF16, ScalarType::kF32},
                                  {ScalarType::kBF16, ScalarType::kF32}};

// A dtype pair, width and feature bits (MakeProblem) and, for tests that
// need one, a sequence length.
struct FeatureCase {
  Pair pr;
  int W;
  uint32_t bits;
  int64_t L = 0;
};

// {B, L} of one channel-first row kind each (with 16-byte aligned tensors):
// short vector rows, short scalar rows, long rows on the stream kernels,
// rows on the shifted grid, several chunks per row.
inline constexpr std::array<int64_t, 2> kRowKinds[] = {{1, 128},  {2, 64},   {1, 5},
                                                       {1, 1000}, {2, 1001}, {1, 8192}};

// A generator for one test: seeded from CONV1D_TEST_SEED when set, else at
// random; prints the seed and how to replay it.
std::mt19937_64 TestRng();

// A problem from feature bits: 1 SiLU, 2 bias, 4 initial states, 8 final /
// dfinal states, 16 dinitial states, 32 grad weight in the weight dtype.
kernels::Conv1dProblem MakeProblem(kernels::KernelOp op, Pair pr, kernels::KernelLayout layout,
                                   int64_t D, int W, uint32_t bits);

// The float64 reference's inputs for segment `s` of problem `p`.
ref::Inputs RefInputsOf(const Conv1dProblem& p, const SegmentData& s);

// Checks every output of every segment against the reference: "" or what
// failed.
std::string CheckAll(const Conv1dProblem& p, const std::vector<SegmentData>& segs);

// The problem and the segments' shapes, for failure messages.
std::string Describe(const Conv1dProblem& p, const std::vector<SegmentData>& segs);

// One segment of `batch` rows of `seqlen` with fresh random inputs, run in
// a fused launch and checked: "" when every output is right, else what
// failed and the problem.
std::string RunOneSegment(const Conv1dProblem& p, int64_t batch, int64_t seqlen,
                          std::mt19937_64& rng);

// Indices 0, every, 2 * every, ... below n.
std::vector<size_t> EveryNth(size_t n, size_t every);

// Runs `segs` (inputs made) in one fused launch and checks every output
// against the reference; then runs each segment listed in `alone` in a
// launch of its own, checks it against the reference, and expects each of
// its outputs (y, final_states, dx, dweight, dbias, dinitial_states) to
// hold the same bytes as in the fused launch. A launch or reference failure
// is fatal (call in ASSERT_NO_FATAL_FAILURE); a byte mismatch is not.
void ExpectFusedEqualSeparate(const Conv1dProblem& p, const std::vector<SegmentData>& segs,
                              const std::vector<size_t>& alone);

// Segments of the given {B, L} (any range of two-element shapes) with
// fresh random inputs.
template <class Shapes>
std::vector<SegmentData> MakeSegments(const Conv1dProblem& p, const Shapes& shapes,
                                      std::mt19937_64& rng) {
  std::vector<SegmentData> segs;
  for (const auto& sh : shapes) {
    segs.emplace_back();
    segs.back().batch = sh[0];
    segs.back().seqlen = sh[1];
    MakeInputs(p, &segs.back(), rng);
  }
  return segs;
}

// Plans segments of the given {B, L} on placeholder pointers, 256-byte
// aligned so that the vector paths are legal (host work: nothing is
// launched or read), and returns the plan; `table` gets the planned table.
kernels::Conv1dPlanInfo PlanShapes(const Conv1dProblem& p,
                                   const std::vector<std::array<int64_t, 2>>& shapes,
                                   std::vector<Conv1dSegment>* table);

}  // namespace conv1d::testing

#endif  // CONV1D_TESTS_GPU_GPU_CHECK_H_
