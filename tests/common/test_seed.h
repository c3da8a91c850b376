// Seeds for randomized tests, so that every failure can be replayed. A test
// takes its seed from CONV1D_TEST_SEED_SCOPE (or TestSeed), which returns
// the value of the environment variable CONV1D_TEST_SEED when it is set
// (decimal or 0x-prefixed hex; "random" draws a fresh seed) and the test's
// fixed default otherwise. The seed is recorded as the test's "seed" property
// (in --gtest_output=xml reports) and, through SCOPED_TRACE, printed with
// every failure together with the command line that replays it.
//
// Used by every randomized suite under tests/. Thread-safe: TestSeed may be
// called from any thread, but the SCOPED_TRACE/RecordProperty part only
// reaches the report from the test's main thread.
#ifndef CONV1D_TESTS_COMMON_TEST_SEED_H_
#define CONV1D_TESTS_COMMON_TEST_SEED_H_

#include <cstdint>
#include <string>

#include "gtest/gtest.h"

namespace conv1d::testing {

// The environment variable that overrides every test's default seed.
inline constexpr char kTestSeedEnv[] = "CONV1D_TEST_SEED";

// CONV1D_TEST_SEED when set and valid, else `default_seed`. An unparsable
// value fails the current test (naming the variable) and falls back to the
// default. Records the result as the current test's "seed" property.
uint64_t TestSeed(uint64_t default_seed);

// "seed 7 (replay: CONV1D_TEST_SEED=7 ./binary --gtest_filter=Suite.Test)".
std::string SeedMessage(uint64_t seed);

// The same for fixtures, as a member: takes the seed when the fixture is
// built and attaches it to every failure until the fixture is destroyed.
class SeedScope {
 public:
  explicit SeedScope(uint64_t default_seed)
      : seed_(TestSeed(default_seed)), trace_(__FILE__, __LINE__, SeedMessage(seed_)) {}
  uint64_t seed() const { return seed_; }

 private:
  uint64_t seed_;
  ::testing::ScopedTrace trace_;
};

}  // namespace conv1d::testing

// Declares `const uint64_t var` holding this test's seed and attaches it to
// every failure reported in the enclosing scope.
#define CONV1D_TEST_SEED_SCOPE(var, default_seed)                   \
  const uint64_t var = ::conv1d::testing::TestSeed(default_seed); \
  SCOPED_TRACE(::conv1d::testing::SeedMessage(var))

#endif  // CONV1D_TESTS_COMMON_TEST_SEED_H_
