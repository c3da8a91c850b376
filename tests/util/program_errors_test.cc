// ProgramErrors: the exact stderr lines and exit statuses of the binaries'
// usage errors and failures.
#include "server/util/program_errors.h"

#include <string>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace conv1d {
namespace {

TEST(ProgramErrors, UsageErrorNamesTheProgramPointsAtHelpAndReturns2) {
  constexpr ProgramErrors errors{"conv1d_test", /*fail_status=*/1};
  testing::internal::CaptureStderr();
  const int status = errors.UsageError("--width: 0 is not >= 1");
  EXPECT_EQ(testing::internal::GetCapturedStderr(),
            "conv1d_test: --width: 0 is not >= 1\n(see conv1d_test --help)\n");
  EXPECT_EQ(status, 2);
}

TEST(ProgramErrors, FailPrintsTheStatusAndReturnsFailStatus) {
  for (int fail_status : {1, 2}) {
    const ProgramErrors errors{"conv1d_test", fail_status};
    testing::internal::CaptureStderr();
    const int status = errors.Fail(absl::UnavailableError("connection refused"));
    EXPECT_EQ(testing::internal::GetCapturedStderr(),
              "conv1d_test: UNAVAILABLE: connection refused\n");
    EXPECT_EQ(status, fail_status);
  }
}

TEST(ProgramErrors, FailStatusIs1ByDefault) {
  EXPECT_EQ(ProgramErrors{"conv1d_test"}.fail_status, 1);
}

}  // namespace
}  // namespace conv1d
