// Test helper: the real conv1d_server binary (the path CMake built, or
// $CONV1D_SERVER_BINARY when set) as a child process, its stdout and stderr
// together in a temporary file.
//
// Used by the suites in tests/e2e that run the binary.
// The destructor SIGKILLs a server still running and removes the file.
// Not thread-safe; one owner.
#ifndef CONV1D_TESTS_E2E_SERVER_PROCESS_H_
#define CONV1D_TESTS_E2E_SERVER_PROCESS_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/time/time.h"

namespace conv1d::e2e {

class ServerProcess {
 public:
  // Starts conv1d_server with `args`; started() says whether that worked.
  explicit ServerProcess(std::vector<std::string> args);
  ~ServerProcess();

  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  bool started() const { return spawn_error_ == 0; }
  pid_t pid() const { return pid_; }
  // Everything the server wrote so far, stdout and stderr interleaved.
  std::string Log() const;
  // Waits for exit; the exit code, or -1 on timeout, -2 when killed by a signal.
  int Wait(absl::Duration timeout);
  // Reads the gRPC port from the startup log line; 0 when not (yet) there.
  int Port() const;
  // Waits up to `timeout` for the startup line; its port, or 0.
  int WaitForPort(absl::Duration timeout) const;

 private:
  std::string log_path_;
  pid_t pid_ = -1;
  int spawn_error_ = 0;
  bool exited_ = false;
};

}  // namespace conv1d::e2e

#endif  // CONV1D_TESTS_E2E_SERVER_PROCESS_H_
