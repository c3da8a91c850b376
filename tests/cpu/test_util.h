// Helpers shared by the CPU backend tests: building random problems as
// ConvBuffers, decoding buffers to float64 for the reference, poisoning
// outputs, and comparing results against the reference with dtype-aware
// error bounds. Test-only; not thread-safe (each test owns its data).
#ifndef CONV1D_TESTS_CPU_TEST_UTIL_H_
#define CONV1D_TESTS_CPU_TEST_UTIL_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/backends/cpu/cpu_conv.h"
#include "server/core/conv_problem.h"
#include "tests/common/reference.h"

namespace conv1d::testing_cpu {

// Fills `out` with n values uniform in [lo, hi) rounded to dtype t. Values are
// kept away from zero so that no test passes on untouched zero buffers.
void FillRandom(std::vector<uint8_t>* out, DType t, int64_t n, std::mt19937_64& rng,
                double lo = -1.0, double hi = 1.0);

std::vector<double> ToDouble(const std::vector<uint8_t>& bytes, DType t);
std::vector<uint8_t> FromDouble(const std::vector<double>& v, DType t);

// A key with bias, every state tensor the op takes or returns, and fp32
// weight gradients.
BatchKey KeyWithStates(Op op, DType x_dtype, DType weight_dtype, int width, Layout layout,
                       int64_t dim, Activation activation = Activation::kSiLU);

// Random inputs for every tensor the key uses.
ConvBuffers MakeProblem(const BatchKey& key, int64_t batch, int64_t seqlen,
                        int64_t state_len, uint64_t seed);

// Decodes a problem's inputs for the reference.
ref::Inputs ToReference(const ConvBuffers& p);

// Sizes the outputs and fills them with all-ones bytes (NaN in every dtype).
void AllocatePoisoned(ConvBuffers* p);

// Runs the reference for the problem's op.
ref::Outputs RunReference(const ConvBuffers& p);

// Compares got (bytes of dtype t) against ref element by element:
// |got - ref| <= ulp(t)·|ref| + acc_eps·scale + tiny(t). Reports the first
// few failures with their index; NaN always fails.
::testing::AssertionResult Close(const std::string& name, const std::vector<uint8_t>& got,
                                 DType t, const std::vector<double>& ref,
                                 const std::vector<double>& scale, double acc_eps);

// Compares every output the problem has against the reference.
void ExpectMatchesReference(const ConvBuffers& p, const ref::Outputs& r,
                            const std::string& context);

}  // namespace conv1d::testing_cpu

#endif  // CONV1D_TESTS_CPU_TEST_UTIL_H_
