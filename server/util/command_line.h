// Command-line parsing for the project's binaries (conv1d_server,
// conv1d_client, conv1d_load) with their shared exit table: absl's parser
// exits with status 1 both after a malformed flag and after --help or
// --version; ParseFlags makes those exits 2 (bad usage) and 0 (usage
// printed, as asked).
//
// Thread-safety: ParseFlags must be called from the main thread before other
// threads exist, as absl::ParseCommandLine itself; IsUsageFlag is
// thread-safe.
#ifndef CONV1D_SERVER_UTIL_COMMAND_LINE_H_
#define CONV1D_SERVER_UTIL_COMMAND_LINE_H_

#include <vector>

#include "absl/strings/string_view.h"

namespace conv1d {

// Whether `arg` is one of absl's usage flags (-help, --helpfull=x, --version,
// --only_check_args, ...), after which the parser prints and exits.
bool IsUsageFlag(absl::string_view arg);

// absl::ParseCommandLine(argc, argv) with the exit statuses above: returns
// the positional arguments (argv[0] first) after a successful parse, and
// exits 0 after a usage flag or 2 after a flag it rejects.
std::vector<char*> ParseFlags(int argc, char** argv);

}  // namespace conv1d

#endif  // CONV1D_SERVER_UTIL_COMMAND_LINE_H_
