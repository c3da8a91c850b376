// Test harness for the conv1d GPU kernels: random host tensors in each
// dtype, device buffers with poisoned outputs, one fused launch over a
// ragged segment table, and comparison against the float64 reference.
//
// Used by tests/gpu only. Not thread-safe (one harness per test).
#ifndef CONV1D_TESTS_GPU_GPU_HARNESS_H_
#define CONV1D_TESTS_GPU_GPU_HARNESS_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/conv1d_kernels.h"

namespace conv1d::testing {

using kernels::Conv1dProblem;
using kernels::Conv1dSegment;
using kernels::ScalarType;

bool HaveDevice();

// Skips the calling test (a GoogleTest body or SetUp) when no device is
// present.
#define REQUIRE_DEVICE() \
  if (!::conv1d::testing::HaveDevice()) GTEST_SKIP() << "no GPU device"

// A host tensor stored in its dtype's bytes.
struct HostTensor {
  ScalarType type = ScalarType::kF32;
  int64_t n = 0;
  std::vector<uint8_t> bytes;
  std::vector<double> Values() const;
};

HostTensor RandomTensor(ScalarType type, int64_t n, double scale, std::mt19937_64& rng);

// Inputs and (after Run) outputs of one segment, as host tensors.
struct SegmentData {
  int64_t batch = 1, seqlen = 1, state_len = 0;
  HostTensor x, weight, bias, init, dout, dfinal, state;
  HostTensor y, final_states, dx, dweight, dbias, dinit, state_out;
};

// Fills random inputs for `seg` as `p` requires.
void MakeInputs(const Conv1dProblem& p, SegmentData* seg, std::mt19937_64& rng);

// Uploads all segments, poisons every output (all-ones bytes: NaN in every
// dtype), runs one fused launch `repeats` times and downloads the outputs.
// `misalign` offsets activation pointers by one element. Returns the
// runtime error text, or "" on success.
std::string RunFused(const Conv1dProblem& p, std::vector<SegmentData>* segs, bool misalign = false,
                     int repeats = 1);

// The forward or backward of `segs` (inputs made) `repeats` times on a
// stream of its own with no host wait in between: each time every output
// is poisoned (hipMemsetAsync), the launch enqueued and every output
// copied back (hipMemcpyAsync), all in stream order; one wait at the end.
// (*runs)[r] holds repeat r's outputs. Whatever follows a launch in its
// stream must find every kernel of it finished. Returns the runtime error
// text, or "" on success.
std::string RunFusedInStreamOrder(const Conv1dProblem& p, const std::vector<SegmentData>& segs,
                                  int repeats, std::vector<std::vector<SegmentData>>* runs);

// Compares a device result with the reference: every element finite and
// |got - ref| <= tol * (|ref| + rms(ref)). Returns "" or a description.
std::string Compare(const std::string& what, const HostTensor& got, const std::vector<double>& ref,
                    double tol);

double Tolerance(ScalarType t);

}  // namespace conv1d::testing

#endif  // CONV1D_TESTS_GPU_GPU_HARNESS_H_
