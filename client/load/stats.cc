#include "client/load/stats.h"

#include <algorithm>
#include <cmath>

namespace conv1d {

double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const double n = static_cast<double>(sorted.size());
  const double rank = std::ceil(std::clamp(p, 0.0, 100.0) / 100.0 * n);
  const size_t idx = static_cast<size_t>(std::clamp(rank - 1, 0.0, n - 1));
  return sorted[idx];
}

void WindowStats::Merge(const WindowStats& o) {
  duration_s += o.duration_s;
  completed += o.completed;
  errors += o.errors;
  for (const auto& [code, n] : o.errors_by_code) errors_by_code[code] += n;
  bytes += o.bytes;
  latencies_us.insert(latencies_us.end(), o.latencies_us.begin(), o.latencies_us.end());
  server_queue_sum_s += o.server_queue_sum_s;
  server_queue_count += o.server_queue_count;
  server_compute_sum_s += o.server_compute_sum_s;
  server_compute_count += o.server_compute_count;
  server_requests += o.server_requests;
  if (by_workload.size() < o.by_workload.size()) by_workload.resize(o.by_workload.size());
  for (size_t i = 0; i < o.by_workload.size(); ++i) by_workload[i].Merge(o.by_workload[i]);
  gpu.Merge(o.gpu);
}

void WorkloadCounts::Merge(const WorkloadCounts& o) {
  completed += o.completed;
  errors += o.errors;
  for (const auto& [code, n] : o.errors_by_code) errors_by_code[code] += n;
  bytes += o.bytes;
  latencies_us.insert(latencies_us.end(), o.latencies_us.begin(), o.latencies_us.end());
}

LatencySummary Summarize(std::vector<double>& v) {
  LatencySummary s;
  if (v.empty()) return s;
  s.count = static_cast<int64_t>(v.size());
  std::sort(v.begin(), v.end());
  s.p50_us = Percentile(v, 50);
  s.p90_us = Percentile(v, 90);
  s.p95_us = Percentile(v, 95);
  s.p99_us = Percentile(v, 99);
  s.p999_us = Percentile(v, 99.9);
  s.max_us = v.back();
  double sum = 0;
  for (double x : v) sum += x;
  s.mean_us = sum / static_cast<double>(v.size());
  return s;
}

bool IsStable(const std::vector<double>& throughputs, const std::vector<double>& p99s,
              int n, double pct) {
  if (n < 1 || throughputs.size() < static_cast<size_t>(n) ||
      p99s.size() < static_cast<size_t>(n)) {
    return false;
  }
  auto within = [&](const std::vector<double>& v) {
    double mean = 0;
    for (size_t i = v.size() - n; i < v.size(); ++i) mean += v[i];
    mean /= n;
    for (size_t i = v.size() - n; i < v.size(); ++i) {
      if (std::fabs(v[i] - mean) > pct / 100.0 * std::fabs(mean)) return false;
    }
    return true;
  };
  return within(throughputs) && within(p99s);
}

}  // namespace conv1d
