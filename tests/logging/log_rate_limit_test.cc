// LogRateLimiter: a source writes `burst` lines per window, the rest are
// counted and reported once when its next window starts; sources are
// independent; the table of sources stays bounded.
#include "server/logging/log_rate_limit.h"

#include "gtest/gtest.h"

namespace conv1d {
namespace {

TEST(LogRateLimiter, BurstThenCountedSuppressionPerSource) {
  LogRateLimitOptions o;
  o.burst = 3;
  o.window = absl::Seconds(10);
  LogRateLimiter limiter(o);
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  int written = 0;
  for (int i = 0; i < 50; ++i) {
    const LogRateLimiter::Verdict v = limiter.Admit("ssl.cc", 42, t0 + absl::Milliseconds(i));
    written += v.write;
    EXPECT_EQ(v.suppressed, 0);
  }
  EXPECT_EQ(written, 3);
  // Another source has its own budget.
  EXPECT_TRUE(limiter.Admit("ssl.cc", 43, t0).write);
  EXPECT_TRUE(limiter.Admit("parse.cc", 42, t0).write);
  // The next window reports the 47 dropped lines once, then writes again.
  LogRateLimiter::Verdict v = limiter.Admit("ssl.cc", 42, t0 + absl::Seconds(10));
  EXPECT_TRUE(v.write);
  EXPECT_EQ(v.suppressed, 47);
  v = limiter.Admit("ssl.cc", 42, t0 + absl::Seconds(11));
  EXPECT_TRUE(v.write);
  EXPECT_EQ(v.suppressed, 0);
}

TEST(LogRateLimiter, SourceTableStaysBounded) {
  LogRateLimitOptions o;
  o.burst = 1;
  o.max_sources = 4;
  LogRateLimiter limiter(o);
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  for (int line = 0; line < 100; ++line) {
    EXPECT_TRUE(limiter.Admit("f.cc", line, t0 + absl::Seconds(line)).write) << line;
  }
  // The most recent source is still tracked: its second line is dropped.
  EXPECT_FALSE(limiter.Admit("f.cc", 99, t0 + absl::Seconds(99)).write);
}

}  // namespace
}  // namespace conv1d
