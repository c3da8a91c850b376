// fp16/bf16 conversions of server/core/dtype.h (and the branchless copies the
// CPU backend vectorises) against known values and an independent
// nearest-value search over every representable 16-bit value.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "server/backends/cpu/cpu_conv_internal.h"
#include "server/core/dtype.h"
#include "tests/common/test_seed.h"

namespace conv1d {
namespace {

using cpu_internal::FloatToHalfBranchless;
using cpu_internal::HalfToFloatBranchless;

float Bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

TEST(DType, HalfKnownValues) {
  EXPECT_EQ(HalfToFloat(0x3c00), 1.0f);
  EXPECT_EQ(HalfToFloat(0xc000), -2.0f);
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(HalfToFloat(0x03ff), 1023 * std::ldexp(1.0f, -24));
  EXPECT_EQ(HalfToFloat(0x0400), std::ldexp(1.0f, -14));
  EXPECT_EQ(HalfToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(HalfToFloat(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(HalfToFloat(0xfc00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7e00)));
  EXPECT_TRUE(std::signbit(HalfToFloat(0x8000)));

  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7bff);  // below the rounding midpoint
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);  // midpoint rounds to even = inf
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie -> even
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie -> even
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);             // tie -> 0
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0001f, -25)), 0x0001);
  EXPECT_EQ(FloatToHalf(3 * std::ldexp(1.0f, -25)), 0x0002);  // 1.5 steps -> 2
  EXPECT_EQ(FloatToHalf(-std::ldexp(1.0f, -26)), 0x8000);
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::infinity()), 0x7c00);
  const uint16_t nan = FloatToHalf(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x03ff, 0);
}

TEST(DType, BF16KnownValues) {
  EXPECT_EQ(BF16ToFloat(0x3f80), 1.0f);
  EXPECT_EQ(BF16ToFloat(0x0001), Bits(0x00010000u));  // subnormal
  EXPECT_EQ(FloatToBF16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);      // tie -> even
  EXPECT_EQ(FloatToBF16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);  // tie -> even
  EXPECT_EQ(FloatToBF16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 0x3f81);
  EXPECT_EQ(FloatToBF16(std::numeric_limits<float>::max()), 0x7f80);  // rounds to inf
  EXPECT_EQ(FloatToBF16(-std::numeric_limits<float>::infinity()), 0xff80);
  EXPECT_EQ(FloatToBF16(Bits(0x00018000u)), 0x0002);  // subnormal tie -> even
  const uint16_t nan = FloatToBF16(Bits(0x7f800001u));  // NaN with low payload only
  EXPECT_TRUE(std::isnan(BF16ToFloat(nan)));
}

// Nearest representable value by search over all finite values of a 16-bit
// format (ties to the even code), independent of the bit tricks under test.
class NearestSearch {
 public:
  explicit NearestSearch(float (*decode)(uint16_t)) {
    for (uint32_t h = 0; h < 0x10000; ++h) {
      const float v = decode(static_cast<uint16_t>(h));
      if (std::isfinite(v) && !(v == 0 && std::signbit(v))) values_.push_back({v, static_cast<uint16_t>(h)});
    }
    std::sort(values_.begin(), values_.end(), [](auto a, auto b) { return a.first < b.first; });
  }
  // Returns the code of the nearest value; `overflow` when past the largest
  // finite value by half an ulp or more (rounds to inf).
  uint16_t Nearest(float f, bool* overflow) const {
    const double x = f;
    auto it = std::lower_bound(values_.begin(), values_.end(), f,
                               [](auto a, float v) { return a.first < v; });
    *overflow = false;
    if (it == values_.end() || it == values_.begin()) {
      const auto& edge = it == values_.end() ? values_.back() : values_.front();
      const double ulp = std::fabs(edge.first - (it == values_.end() ? values_[values_.size() - 2].first
                                                                      : values_[1].first));
      if (std::fabs(x - edge.first) >= ulp / 2) *overflow = true;
      return edge.second;
    }
    const auto lo = *(it - 1), hi = *it;
    const double dlo = x - lo.first, dhi = hi.first - x;
    if (dlo < dhi) return lo.second;
    if (dhi < dlo) return hi.second;
    return (lo.second & 1) ? hi.second : lo.second;
  }

 private:
  std::vector<std::pair<float, uint16_t>> values_;
};

TEST(DType, HalfRoundingMatchesNearestSearch) {
  const NearestSearch search(&HalfToFloat);
  CONV1D_TEST_SEED_SCOPE(test_seed, 11);
  std::mt19937_64 rng(test_seed);
  std::uniform_int_distribution<int> exp_dist(-30, 17);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  for (int i = 0; i < 200000; ++i) {
    float f = std::ldexp(mant(rng), exp_dist(rng));
    if (i & 1) f = -f;
    bool overflow;
    uint16_t want = search.Nearest(f, &overflow);
    if (overflow) want = f > 0 ? 0x7c00 : 0xfc00;
    if (want == 0x0000 && f < 0) want = 0x8000;
    ASSERT_EQ(FloatToHalf(f), want) << f;
    ASSERT_EQ(FloatToHalfBranchless(f), want) << f;
  }
}

TEST(DType, BF16RoundingMatchesNearestSearch) {
  const NearestSearch search(&BF16ToFloat);
  CONV1D_TEST_SEED_SCOPE(test_seed, 12);
  std::mt19937_64 rng(test_seed);
  std::uniform_int_distribution<uint32_t> bits_dist;
  for (int i = 0; i < 200000; ++i) {
    const float f = Bits(bits_dist(rng) & 0x7fffffffu);
    if (!std::isfinite(f)) continue;
    bool overflow;
    uint16_t want = search.Nearest(f, &overflow);
    if (overflow) want = 0x7f80;
    ASSERT_EQ(FloatToBF16(f), want) << f;
  }
}

// Every 16-bit code decodes identically in both implementations and survives
// a round trip (NaNs stay NaN).
TEST(DType, ExhaustiveSixteenBitRoundTrips) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint16_t code = static_cast<uint16_t>(h);
    const float f = HalfToFloat(code);
    const float g = HalfToFloatBranchless(code);
    ASSERT_EQ(std::memcmp(&f, &g, sizeof f), 0) << std::hex << h;
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(HalfToFloat(FloatToHalf(f))));
      ASSERT_TRUE(std::isnan(HalfToFloat(FloatToHalfBranchless(f))));
    } else {
      ASSERT_EQ(FloatToHalf(f), code) << std::hex << h;
      ASSERT_EQ(FloatToHalfBranchless(f), code) << std::hex << h;
    }
    const float b = BF16ToFloat(code);
    if (std::isnan(b)) {
      ASSERT_TRUE(std::isnan(BF16ToFloat(FloatToBF16(b))));
    } else {
      ASSERT_EQ(FloatToBF16(b), code) << std::hex << h;
    }
  }
}

// The branchless fp32 -> fp16 equals dtype.h on a stride through all floats.
TEST(DType, BranchlessHalfMatchesOnFloatSweep) {
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 4099) {
    const float f = Bits(static_cast<uint32_t>(u));
    ASSERT_EQ(FloatToHalfBranchless(f), FloatToHalf(f)) << std::hex << u;
  }
}

}  // namespace
}  // namespace conv1d
