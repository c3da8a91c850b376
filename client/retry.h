// Retry policy of the client library: which gRPC codes are retried
// (UNAVAILABLE, RESOURCE_EXHAUSTED), exponential backoff with jitter, and the
// server's `grpc-retry-pushback-ms` trailer, which overrides the computed
// delay (a negative or malformed value means "do not retry", as in gRPC's
// retry design).
//
// Used by Conv1dClient for sync and async calls. RetryPolicy is a plain
// value; BackoffDelay is a pure function of its arguments.
#ifndef CONV1D_CLIENT_RETRY_H_
#define CONV1D_CLIENT_RETRY_H_

#include <optional>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace conv1d {

struct RetryPolicy {
  // Attempts per call including the first; 1 disables retries.
  int max_attempts = 4;
  absl::Duration initial_backoff = absl::Milliseconds(20);
  absl::Duration max_backoff = absl::Seconds(2);
  double backoff_multiplier = 2.0;
  // Each delay is scaled by a uniform factor in [1 - jitter, 1 + jitter].
  double jitter = 0.2;
  bool retry_unavailable = true;
  bool retry_resource_exhausted = true;

  bool IsRetryable(absl::StatusCode code) const;
};

// What the server's pushback trailer asks for.
struct Pushback {
  bool present = false;
  bool dont_retry = false;  // negative or malformed value
  absl::Duration delay;
};
Pushback ParsePushback(absl::string_view value);

// Delay before retry number `retry` (1 = the first retry). `uniform01` is a
// random number in [0, 1) that drives the jitter.
absl::Duration BackoffDelay(const RetryPolicy& policy, int retry,
                            double uniform01, const Pushback& pushback);

}  // namespace conv1d

#endif  // CONV1D_CLIENT_RETRY_H_
