#include "server/util/command_line.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "absl/flags/parse.h"
#include "absl/strings/strip.h"

namespace conv1d {
namespace {

// Set while absl::ParseCommandLine runs: an exit then is the parser's.
std::atomic<bool> g_parsing{false};
std::atomic<bool> g_usage_flag_given{false};

void FixParseExitStatus() {
  if (!g_parsing.load()) return;
  std::fflush(nullptr);
  std::_Exit(g_usage_flag_given.load() ? 0 : 2);
}

}  // namespace

bool IsUsageFlag(absl::string_view arg) {
  if (!absl::ConsumePrefix(&arg, "-")) return false;
  absl::ConsumePrefix(&arg, "-");
  arg = arg.substr(0, arg.find('='));
  for (absl::string_view name : {"help", "helpfull", "helpshort", "helppackage", "helpon",
                                 "helpmatch", "version", "only_check_args"}) {
    if (arg == name) return true;
  }
  return false;
}

std::vector<char*> ParseFlags(int argc, char** argv) {
  bool usage = false;
  for (int i = 1; i < argc; ++i) usage = usage || IsUsageFlag(argv[i]);
  g_usage_flag_given.store(usage);
  static const bool registered = (std::atexit(FixParseExitStatus), true);
  (void)registered;
  g_parsing.store(true);
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  g_parsing.store(false);
  return args;
}

}  // namespace conv1d
