// ParseFlags and IsUsageFlag: which arguments count as usage flags, what a
// good parse returns, and the exit statuses of the binaries' table (0 after
// --help or --version, 2 after a malformed or unknown flag), checked in
// child processes (death tests).
#include "server/util/command_line.h"

#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "gtest/gtest.h"

ABSL_FLAG(int, command_line_test_level, 1, "A flag for the tests to set.");

namespace conv1d {
namespace {

TEST(IsUsageFlag, AbslsUsageFlagsWithOneOrTwoDashesAndAnyValue) {
  for (const char* arg : {"--help", "-help", "--helpfull", "--helpshort", "--helppackage",
                          "--helpon=server", "-helpmatch=listen", "--version",
                          "--only_check_args", "--help=true"}) {
    EXPECT_TRUE(IsUsageFlag(arg)) << arg;
  }
}

TEST(IsUsageFlag, OtherArguments) {
  for (const char* arg : {"", "-", "--", "help", "-h", "---help", "--helpme", "--hel",
                          "--listen=--help", "--versions", "--x_file=help"}) {
    EXPECT_FALSE(IsUsageFlag(arg)) << arg;
  }
}

// ParseFlags on a copy of `args` (absl keeps pointers into argv).
std::vector<std::string> Parse(std::vector<std::string> args) {
  static std::vector<std::vector<std::string>> kept;
  kept.push_back(std::move(args));
  std::vector<char*> argv;
  for (std::string& a : kept.back()) argv.push_back(a.data());
  std::vector<std::string> out;
  for (char* p : ParseFlags(static_cast<int>(argv.size()), argv.data())) out.emplace_back(p);
  return out;
}

TEST(ParseFlags, SetsFlagsAndReturnsThePositionalArguments) {
  EXPECT_EQ(Parse({"prog", "--command_line_test_level=5", "run", "now"}),
            (std::vector<std::string>{"prog", "run", "now"}));
  EXPECT_EQ(absl::GetFlag(FLAGS_command_line_test_level), 5);
}

TEST(ParseFlagsDeathTest, AMalformedValueExits2) {
  EXPECT_EXIT(Parse({"prog", "--command_line_test_level=five"}), ::testing::ExitedWithCode(2),
              "command_line_test_level");
}

TEST(ParseFlagsDeathTest, AnUnknownFlagExits2) {
  EXPECT_EXIT(Parse({"prog", "--no_such_flag_anywhere=1"}), ::testing::ExitedWithCode(2),
              "no_such_flag_anywhere");
}

TEST(ParseFlagsDeathTest, HelpAndVersionExit0) {
  EXPECT_EXIT(Parse({"prog", "--helpshort"}), ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(Parse({"prog", "--version"}), ::testing::ExitedWithCode(0), "");
}

TEST(ParseFlagsDeathTest, ABadValueNextToHelpStillExits0) {
  // absl prints the usage; the usage flag decides the status.
  EXPECT_EXIT(Parse({"prog", "--help", "--command_line_test_level=five"}),
              ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace conv1d
