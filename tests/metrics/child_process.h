// Test helper: runs a program as a child process for the live metrics test
// (conv1d_server, prometheus) and makes sure it is gone afterwards: the
// destructor sends SIGTERM, waits, then SIGKILLs; the child also gets
// SIGKILL if the test process dies first (PR_SET_PDEATHSIG).
// Not thread-safe; one owner.
#ifndef CONV1D_TESTS_METRICS_CHILD_PROCESS_H_
#define CONV1D_TESTS_METRICS_CHILD_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

namespace conv1d::testing {

class ChildProcess {
 public:
  // Starts argv[0] (a path) with its output appended to `log_path`.
  // Returns null when fork/exec fails.
  static std::unique_ptr<ChildProcess> Start(const std::vector<std::string>& argv,
                                             const std::string& log_path);
  ~ChildProcess();

  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // False once the child has exited.
  bool Running();
  pid_t pid() const { return pid_; }
  // SIGTERM, then SIGKILL after `grace_ms`; returns the exit status as
  // waitpid reports it (or -1 when already reaped).
  int Stop(int grace_ms = 10000);

 private:
  explicit ChildProcess(pid_t pid) : pid_(pid) {}
  pid_t pid_;
  bool reaped_ = false;
  int status_ = -1;
};

// GET http://127.0.0.1:port/target over a plain socket (HTTP/1.0, no gzip).
// Returns the whole response (status line, headers, body); empty when the
// connection fails. `timeout_ms` bounds connect and each read.
std::string HttpGet(int port, const std::string& target, int timeout_ms = 5000);
// The body of an HTTP response when its status is 200, else empty.
std::string HttpBody200(const std::string& response);
std::string UrlEncode(const std::string& s);

}  // namespace conv1d::testing

#endif  // CONV1D_TESTS_METRICS_CHILD_PROCESS_H_
