// How conv1d_server, conv1d_client and conv1d_load report a bad command line
// or a failed operation on stderr, and the exit status main then returns.
// Each binary holds one ProgramErrors naming itself:
//
//   UsageError: "<program>: <message>\n(see <program> --help)\n", exit 2
//   Fail:       "<program>: <status.ToString()>\n", exit fail_status
//
// Stateless: a ProgramErrors is a constant value whose calls keep nothing, so
// concurrent calls are safe (each writes its lines with one stdio call).
#ifndef CONV1D_SERVER_UTIL_PROGRAM_ERRORS_H_
#define CONV1D_SERVER_UTIL_PROGRAM_ERRORS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace conv1d {

struct ProgramErrors {
  // The binary's name, the prefix of every line.
  absl::string_view program;
  // Fail's exit status: conv1d_client 1 (a failure at run time), conv1d_load
  // 2 (its setup and run failures share the usage status).
  int fail_status = 1;

  // Bad usage (a flag's value, an argument): prints `message` and the --help
  // hint; returns 2.
  int UsageError(absl::string_view message) const;

  // A failed operation: prints `status`; returns fail_status.
  int Fail(const absl::Status& status) const;
};

}  // namespace conv1d

#endif  // CONV1D_SERVER_UTIL_PROGRAM_ERRORS_H_
