// The process_* metrics: each figure against an independent source (getrusage,
// getrlimit, file descriptors this test opens, the clock), and their presence
// with the standard names and types in a scrape of a live endpoint.
#include "server/metrics/process_collector.h"

#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <ctime>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/metrics/prometheus_observer.h"
#include "tests/metrics/exposition.h"

namespace conv1d {
namespace {

double RusageCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + u.ru_stime.tv_sec +
         u.ru_stime.tv_usec / 1e6;
}

TEST(ProcessCollector, CpuSecondsFollowGetrusage) {
  // Burn 0.25 s of CPU (by getrusage, however busy the machine) so that the
  // figure is well above clock ticks.
  volatile double sink = 0;
  const double start = RusageCpuSeconds();
  while (RusageCpuSeconds() - start < 0.25) {
    for (int i = 0; i < 10000; ++i) sink = sink + std::sqrt(static_cast<double>(i));
  }
  const double before = RusageCpuSeconds();
  absl::StatusOr<ProcessStats> s = ReadProcessStats();
  const double after = RusageCpuSeconds();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_GE(s->cpu_seconds, 0.2);
  // /proc counts in clock ticks (10 ms) and may trail getrusage by one.
  EXPECT_GE(s->cpu_seconds, before - 0.03);
  EXPECT_LE(s->cpu_seconds, after + 0.03);
}

TEST(ProcessCollector, MemoryAgainstMaxRssAndATouchedBuffer) {
  absl::StatusOr<ProcessStats> s0 = ReadProcessStats();
  ASSERT_TRUE(s0.ok()) << s0.status();
  // 64 MiB, every page touched: resident memory grows by about that much.
  std::vector<char> buf(64 << 20);
  for (size_t i = 0; i < buf.size(); i += 4096) buf[i] = static_cast<char>(i);
  absl::StatusOr<ProcessStats> s1 = ReadProcessStats();
  ASSERT_TRUE(s1.ok()) << s1.status();
  EXPECT_GE(s1->resident_bytes - s0->resident_bytes, 60.0 * (1 << 20));
  EXPECT_GE(s1->virtual_bytes, s1->resident_bytes);
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  EXPECT_LE(s1->resident_bytes, u.ru_maxrss * 1024.0 * 1.05);  // maxrss is in KiB
  EXPECT_GT(buf[4096], -128);
}

TEST(ProcessCollector, OpenAndMaxFds) {
  absl::StatusOr<ProcessStats> s0 = ReadProcessStats();
  ASSERT_TRUE(s0.ok()) << s0.status();
  int fds[6][2];
  for (auto& p : fds) ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, p), 0);
  absl::StatusOr<ProcessStats> s1 = ReadProcessStats();
  for (auto& p : fds) close(p[0]), close(p[1]);
  ASSERT_TRUE(s1.ok()) << s1.status();
  EXPECT_EQ(s1->open_fds - s0->open_fds, 12);
  rlimit r{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &r), 0);
  EXPECT_EQ(s1->max_fds, static_cast<double>(r.rlim_cur));
}

TEST(ProcessCollector, StartTimeIsThisRunsStart) {
  absl::StatusOr<ProcessStats> s = ReadProcessStats();
  ASSERT_TRUE(s.ok()) << s.status();
  const double now = static_cast<double>(std::time(nullptr));
  // Started before now, and this test binary runs for minutes at most.
  EXPECT_LE(s->start_time_seconds, now + 1);
  EXPECT_GE(s->start_time_seconds, now - 600);
}

TEST(ProcessCollector, MissingProcIsAnError) {
  EXPECT_FALSE(ReadProcessStats("/nonexistent-proc").ok());
}

TEST(ProcessCollector, ExportedWithStandardNamesAndTypes) {
  MetricsOptions options;
  options.listen_address = "";
  auto obs = PrometheusObserver::Create(options);
  ASSERT_TRUE(obs.ok()) << obs.status();
  const testing::Exposition e = testing::Exposition::Parse((*obs)->Render());
  const std::vector<std::pair<std::string, std::string>> want = {
      {"process_cpu_seconds_total", "counter"},   {"process_resident_memory_bytes", "gauge"},
      {"process_virtual_memory_bytes", "gauge"},  {"process_open_fds", "gauge"},
      {"process_max_fds", "gauge"},               {"process_start_time_seconds", "gauge"}};
  for (const auto& [name, type] : want) {
    ASSERT_TRUE(e.Value(name).has_value()) << name;
    // CPU time counts in clock ticks and may still be 0 in a fresh process.
    if (name == "process_cpu_seconds_total") {
      EXPECT_GE(*e.Value(name), 0) << name;
    } else {
      EXPECT_GT(*e.Value(name), 0) << name;
    }
    auto t = e.types().find(name);
    // prometheus-cpp names a counter's TYPE line without the _total suffix
    // in some versions; either form carries the type.
    if (t == e.types().end() && type == "counter") {
      t = e.types().find(name.substr(0, name.size() - 6));
    }
    ASSERT_NE(t, e.types().end()) << name;
    EXPECT_EQ(t->second, type) << name;
  }
}

}  // namespace
}  // namespace conv1d
