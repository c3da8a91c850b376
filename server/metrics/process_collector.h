// ProcessCollector: the standard Prometheus process metrics of this process,
// read from /proc when scraped (Linux): process_cpu_seconds_total,
// process_resident_memory_bytes, process_virtual_memory_bytes,
// process_open_fds, process_max_fds and process_start_time_seconds, with the
// names and meanings of Prometheus's own client libraries, so that standard
// dashboards and alerts apply.
//
// Used by PrometheusObserver, which registers it beside its registry.
// Thread-safety: Collect() keeps no state and may run concurrently.
#ifndef CONV1D_SERVER_METRICS_PROCESS_COLLECTOR_H_
#define CONV1D_SERVER_METRICS_PROCESS_COLLECTOR_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace conv1d {

// The figures of one reading, in base units.
struct ProcessStats {
  double cpu_seconds = 0;        // user + system
  double resident_bytes = 0;
  double virtual_bytes = 0;
  double open_fds = 0;
  double max_fds = 0;            // soft RLIMIT_NOFILE
  double start_time_seconds = 0;  // since the Unix epoch
};

// Reads the figures of process `pid` ("self" for this one) under `proc_root`
// (normally /proc; tests may point elsewhere).
absl::StatusOr<ProcessStats> ReadProcessStats(const std::string& proc_root = "/proc",
                                              const std::string& pid = "self");

class ProcessCollector final : public prometheus::Collectable {
 public:
  // An unreadable /proc yields no families (the scrape still succeeds).
  std::vector<prometheus::MetricFamily> Collect() const override;
};

}  // namespace conv1d

#endif  // CONV1D_SERVER_METRICS_PROCESS_COLLECTOR_H_
