#include "server/util/program_errors.h"

#include <cstdio>
#include <string>

namespace conv1d {

int ProgramErrors::UsageError(absl::string_view message) const {
  std::fprintf(stderr, "%.*s: %.*s\n(see %.*s --help)\n", static_cast<int>(program.size()),
               program.data(), static_cast<int>(message.size()), message.data(),
               static_cast<int>(program.size()), program.data());
  return 2;
}

int ProgramErrors::Fail(const absl::Status& status) const {
  const std::string text = status.ToString();
  std::fprintf(stderr, "%.*s: %s\n", static_cast<int>(program.size()), program.data(),
               text.c_str());
  return fail_status;
}

}  // namespace conv1d
