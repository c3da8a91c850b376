#include "client/retry.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"

namespace conv1d {

bool RetryPolicy::IsRetryable(absl::StatusCode code) const {
  return (retry_unavailable && code == absl::StatusCode::kUnavailable) ||
         (retry_resource_exhausted && code == absl::StatusCode::kResourceExhausted);
}

Pushback ParsePushback(absl::string_view value) {
  Pushback p;
  p.present = true;
  int64_t ms;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(value), &ms) || ms < 0) {
    p.dont_retry = true;
    return p;
  }
  p.delay = absl::Milliseconds(ms);
  return p;
}

absl::Duration BackoffDelay(const RetryPolicy& policy, int retry,
                            double uniform01, const Pushback& pushback) {
  if (pushback.present && !pushback.dont_retry) return pushback.delay;
  double scale = std::pow(policy.backoff_multiplier, std::max(0, retry - 1));
  absl::Duration d = policy.initial_backoff * scale;
  if (d > policy.max_backoff) d = policy.max_backoff;
  const double jitter = std::clamp(policy.jitter, 0.0, 1.0);
  const double factor = 1.0 - jitter + 2.0 * jitter * uniform01;
  return d * factor;
}

}  // namespace conv1d
