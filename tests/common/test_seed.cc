#include "tests/common/test_seed.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <random>

namespace conv1d::testing {

uint64_t TestSeed(uint64_t default_seed) {
  uint64_t seed = default_seed;
  const char* env = std::getenv(kTestSeedEnv);
  if (env != nullptr && *env != '\0') {
    if (std::strcmp(env, "random") == 0) {
      seed = (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
    } else {
      char* end = nullptr;
      errno = 0;
      const unsigned long long v = std::strtoull(env, &end, 0);
      if (errno != 0 || end == env || *end != '\0' || *env == '-') {
        ADD_FAILURE() << kTestSeedEnv << "='" << env
                      << "' is not a seed (expected an unsigned integer or 'random'); using "
                      << default_seed;
      } else {
        seed = v;
      }
    }
  }
  if (::testing::UnitTest::GetInstance()->current_test_info() != nullptr) {
    ::testing::Test::RecordProperty("seed", std::to_string(seed));
  }
  return seed;
}

std::string SeedMessage(uint64_t seed) {
  std::string msg = "seed " + std::to_string(seed) + " (replay: " + kTestSeedEnv + "=" +
                    std::to_string(seed);
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  if (info != nullptr) {
    msg += std::string(" <test binary> --gtest_filter=") + info->test_suite_name() + "." +
           info->name();
  }
  return msg + ")";
}

}  // namespace conv1d::testing
