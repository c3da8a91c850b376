// LogRateLimiter: bounds how many lines one source of library messages
// (gRPC core's gpr_log, protobuf's log handler) may write. Such lines are
// triggered by clients (a failed TLS handshake, a string field with invalid
// UTF-8), so on a shared cluster one client could otherwise flood the log.
//
// A source is a (file, line) pair. Each may write `burst` lines per
// `window`; later lines in the window are dropped and counted, and the first
// line the source writes after its window ends is preceded by "N similar
// lines suppressed". Sources are kept in a bounded table (the oldest window
// is evicted when full).
//
// Used by log_setup.cc for the "grpc" and "protobuf" loggers.
// Thread-safety: Admit may be called from any thread (one mutex).
#ifndef CONV1D_SERVER_LOGGING_LOG_RATE_LIMIT_H_
#define CONV1D_SERVER_LOGGING_LOG_RATE_LIMIT_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace conv1d {

struct LogRateLimitOptions {
  int burst = 10;                                // lines per source and window
  absl::Duration window = absl::Seconds(60);
  int max_sources = 1024;                        // sources tracked at once
};

class LogRateLimiter {
 public:
  explicit LogRateLimiter(LogRateLimitOptions options = {}) : options_(options) {}

  struct Verdict {
    bool write = false;     // write this line
    int64_t suppressed = 0; // lines of this source dropped in its last window
  };

  // Whether a line from `file`:`line` at time `now` may be written, and how
  // many of its lines the previous window dropped (reported once).
  Verdict Admit(const char* file, int line, absl::Time now);

 private:
  struct Source {
    absl::Time window_start;
    int written = 0;
    int64_t dropped = 0;
  };
  const LogRateLimitOptions options_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::pair<std::string, int>, Source> sources_ ABSL_GUARDED_BY(mu_);
};

}  // namespace conv1d

#endif  // CONV1D_SERVER_LOGGING_LOG_RATE_LIMIT_H_
