// Exhaustive checks too long for the default suite (ctest label `slow`).
#include <cstdint>
#include <cstring>

#include "gtest/gtest.h"
#include "server/backends/cpu/cpu_conv_internal.h"
#include "server/core/dtype.h"

namespace conv1d {
namespace {

using cpu_internal::FloatToHalfBranchless;

float Bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// All 2^32 floats; minutes on a small machine, hence label `slow`.
TEST(DTypeSlow, BranchlessHalfMatchesOnEveryFloat) {
  for (uint64_t u = 0; u < (uint64_t{1} << 32); ++u) {
    const float f = Bits(static_cast<uint32_t>(u));
    ASSERT_EQ(FloatToHalfBranchless(f), FloatToHalf(f)) << std::hex << u;
  }
}

}  // namespace
}  // namespace conv1d
