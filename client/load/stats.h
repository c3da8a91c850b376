// Measurement arithmetic of the load generator: latency percentiles
// (nearest rank), per-window summaries, the stability rule over the last
// windows, and merging windows into a step result.
//
// Used by load_runner.cc and the unit tests. Plain values and pure
// functions: thread-safe.
#ifndef CONV1D_CLIENT_LOAD_STATS_H_
#define CONV1D_CLIENT_LOAD_STATS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace conv1d {

// Nearest-rank percentile of `sorted` (ascending), p in [0, 100]; 0 for an
// empty input. p = 100 gives the maximum.
double Percentile(const std::vector<double>& sorted, double p);

// One workload's share of a window (a mix has several).
struct WorkloadCounts {
  int64_t completed = 0;  // successful and failed
  int64_t errors = 0;
  std::map<std::string, int64_t> errors_by_code;
  int64_t bytes = 0;
  std::vector<double> latencies_us;  // successes only
  void Merge(const WorkloadCounts& other);
};

// GPU gauges read from a metrics endpoint at window boundaries (e.g. DCGM's
// exporter): sums of samples and how many were taken.
struct GpuSamples {
  double util_sum = 0, power_sum = 0, memory_sum = 0;
  int util_n = 0, power_n = 0, memory_n = 0;
  void Merge(const GpuSamples& o) {
    util_sum += o.util_sum, power_sum += o.power_sum, memory_sum += o.memory_sum;
    util_n += o.util_n, power_n += o.power_n, memory_n += o.memory_n;
  }
};

// What happened in one measurement window (or a merge of several).
struct WindowStats {
  double duration_s = 0;
  int64_t completed = 0;  // successful and failed
  int64_t errors = 0;
  std::map<std::string, int64_t> errors_by_code;  // "RESOURCE_EXHAUSTED" -> n
  int64_t bytes = 0;      // request + response tensor payloads, successes only
  std::vector<double> latencies_us;  // successes only; unsorted until Finalize
  // Server-side figures from /metrics deltas over this window.
  double server_queue_sum_s = 0, server_queue_count = 0;
  double server_compute_sum_s = 0, server_compute_count = 0;
  double server_requests = 0;
  std::vector<WorkloadCounts> by_workload;  // indexed as the run's workloads
  GpuSamples gpu;

  // Successful requests per second (failures are counted, not throughput).
  double throughput_rps() const {
    return duration_s > 0 ? (completed - errors) / duration_s : 0;
  }
  double gbps() const { return duration_s > 0 ? bytes / duration_s / 1e9 : 0; }
  void Merge(const WindowStats& other);
};

// Latency percentiles of the successes; `count` == 0 means there were none
// and every figure is meaningless (reported as n/a).
struct LatencySummary {
  int64_t count = 0;
  double p50_us = 0, p90_us = 0, p95_us = 0, p99_us = 0, p999_us = 0, max_us = 0,
         mean_us = 0;
};
// Sorts `latencies_us` in place.
LatencySummary Summarize(std::vector<double>& latencies_us);

// True when the last `n` windows' throughput and p99 each lie within
// `pct` percent of their mean over those windows.
bool IsStable(const std::vector<double>& throughputs, const std::vector<double>& p99s,
              int n, double pct);

}  // namespace conv1d

#endif  // CONV1D_CLIENT_LOAD_STATS_H_
