#include "server/metrics/process_collector.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "prometheus/client_metric.h"
#include "prometheus/metric_type.h"

namespace conv1d {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream f(path);
  if (!f) return absl::UnavailableError(absl::StrCat("cannot read ", path));
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Boot time in seconds since the epoch: "btime" of /proc/stat.
absl::StatusOr<double> BootTime(const std::string& proc_root) {
  absl::StatusOr<std::string> stat = ReadFile(proc_root + "/stat");
  if (!stat.ok()) return stat.status();
  for (absl::string_view line : absl::StrSplit(*stat, '\n')) {
    if (absl::ConsumePrefix(&line, "btime ")) {
      double t;
      if (absl::SimpleAtod(line, &t)) return t;
    }
  }
  return absl::UnavailableError("no btime in /proc/stat");
}

prometheus::MetricFamily Family(const char* name, const char* help,
                                prometheus::MetricType type, double value) {
  prometheus::MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = type;
  prometheus::ClientMetric m;
  if (type == prometheus::MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  f.metric.push_back(m);
  return f;
}

}  // namespace

absl::StatusOr<ProcessStats> ReadProcessStats(const std::string& proc_root,
                                              const std::string& pid) {
  const std::string dir = absl::StrCat(proc_root, "/", pid);
  absl::StatusOr<std::string> stat = ReadFile(dir + "/stat");
  if (!stat.ok()) return stat.status();
  // Fields after the command, which is in parentheses and may hold spaces.
  const size_t close = stat->rfind(')');
  if (close == std::string::npos) return absl::UnavailableError("malformed stat");
  std::vector<absl::string_view> f =
      absl::StrSplit(absl::string_view(*stat).substr(close + 2), ' ', absl::SkipEmpty());
  // f[0] is field 3 (state): field n is f[n - 3].
  auto field = [&](int n, double* out) {
    return static_cast<int>(f.size()) > n - 3 && absl::SimpleAtod(f[n - 3], out);
  };
  double utime, stime, starttime, vsize, rss;
  if (!field(14, &utime) || !field(15, &stime) || !field(22, &starttime) ||
      !field(23, &vsize) || !field(24, &rss)) {
    return absl::UnavailableError("malformed stat");
  }
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  ProcessStats s;
  s.cpu_seconds = (utime + stime) / ticks;
  s.virtual_bytes = vsize;
  s.resident_bytes = rss * page;
  absl::StatusOr<double> boot = BootTime(proc_root);
  if (!boot.ok()) return boot.status();
  s.start_time_seconds = *boot + starttime / ticks;
  if (DIR* d = opendir((dir + "/fd").c_str())) {
    int n = 0;
    while (const dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') ++n;
    }
    closedir(d);
    s.open_fds = n - (pid == "self" ? 1 : 0);  // not the one opendir holds
  }
  rlimit nofile{};
  if (pid == "self" && getrlimit(RLIMIT_NOFILE, &nofile) == 0) {
    s.max_fds = static_cast<double>(nofile.rlim_cur);
  } else if (absl::StatusOr<std::string> limits = ReadFile(dir + "/limits"); limits.ok()) {
    for (absl::string_view line : absl::StrSplit(*limits, '\n')) {
      if (!absl::ConsumePrefix(&line, "Max open files")) continue;
      std::vector<absl::string_view> parts = absl::StrSplit(line, ' ', absl::SkipEmpty());
      // "unlimited" (or anything else not a number) leaves max_fds as it is.
      double limit = 0;
      if (!parts.empty() && absl::SimpleAtod(parts[0], &limit)) s.max_fds = limit;
    }
  }
  return s;
}

std::vector<prometheus::MetricFamily> ProcessCollector::Collect() const {
  absl::StatusOr<ProcessStats> s = ReadProcessStats();
  if (!s.ok()) return {};
  using prometheus::MetricType;
  return {
      Family("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.",
             MetricType::Counter, s->cpu_seconds),
      Family("process_resident_memory_bytes", "Resident memory size in bytes.",
             MetricType::Gauge, s->resident_bytes),
      Family("process_virtual_memory_bytes", "Virtual memory size in bytes.",
             MetricType::Gauge, s->virtual_bytes),
      Family("process_open_fds", "Number of open file descriptors.", MetricType::Gauge,
             s->open_fds),
      Family("process_max_fds", "Maximum number of open file descriptors.",
             MetricType::Gauge, s->max_fds),
      Family("process_start_time_seconds",
             "Start time of the process since unix epoch in seconds.", MetricType::Gauge,
             s->start_time_seconds),
  };
}

}  // namespace conv1d
