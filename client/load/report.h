// Results of a load run and their JSON / CSV / console forms.
//
// JSON: {"tool": "conv1d_load", "mode": ..., "workloads": [...],
//        "steps": [{"concurrency"|"rate": n, "requests", "errors",
//        "errors_by_code": {...}, "throughput_rps", "gbps", "p50_us", "p90_us",
//        "p95_us", "p99_us", "p999_us", "max_us", ...}], totals...}
//        Each step has the StepColumns() that have a value for it.
// CSV: a header line, then one row per step: "mode" ("concurrency" or
// "rate"), then every StepColumns() entry, the same values as the JSON step
// and empty where it has none (the other loop's level, server figures when
// not scraped); errors_by_code as "CODE:n;CODE:n", stable as true/false.
//
// Used by the load generator and its tests. Plain values: not synchronised.
#ifndef CONV1D_CLIENT_LOAD_REPORT_H_
#define CONV1D_CLIENT_LOAD_REPORT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "client/load/stats.h"

namespace conv1d {

struct StepResult {
  bool closed_loop = true;
  double level = 0;  // concurrency or requests/s
  // Over the measured (last, stable) windows:
  int64_t requests = 0;  // completed, successes and failures
  int64_t errors = 0;
  std::map<std::string, int64_t> errors_by_code;
  double throughput_rps = 0, gbps = 0;
  LatencySummary latency;
  bool stable = false;
  int windows = 0;  // measured in all
  double window_s = 0;    // length of one window, as asked
  double measured_s = 0;  // every window of the step together, as it ran
  // Whole step, warm-up and drain included:
  int64_t sent_total = 0, completed_total = 0, errors_total = 0;
  int64_t late_sends = 0;  // open loop: sends behind schedule
  double max_late_us = 0;
  int64_t verified = 0, wrong = 0, verify_skipped = 0;
  // From the server's /metrics over the measured windows; negative: unknown.
  double server_queue_mean_us = -1, server_compute_mean_us = -1, server_requests = -1;
};

struct RunReport {
  std::string mode;  // "concurrency" or "rate"
  std::vector<std::string> workloads;
  std::vector<StepResult> steps;
  int64_t total_requests = 0;  // completed by the run, all steps, warm-up included
  int64_t total_errors = 0;
  int64_t wrong_answers = 0;
  int64_t setup_calls = 0;  // RPCs besides the load (ServerInfo, weights)
  double server_requests_delta = -1;  // requests metric over the whole run
  std::string first_wrong;  // message of the first wrong answer
};

// The per-step fields of both forms, in output order.
std::vector<std::string> StepColumns();
std::string ReportJson(const RunReport& r);
std::string ReportCsv(const RunReport& r);
std::string StepLine(const StepResult& s);  // one human-readable line
std::string JsonEscape(const std::string& s);

}  // namespace conv1d

#endif  // CONV1D_CLIENT_LOAD_REPORT_H_
