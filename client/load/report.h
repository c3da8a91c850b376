// Results of a load run and their JSON / CSV / console forms.
//
// JSON: {"tool": "conv1d_load", "mode": ..., "workloads": [...],
//        "steps": [{"concurrency"|"rate": n, "requests", "errors",
//        "errors_by_code": {...}, "throughput_rps", "gbps", "p50_us", "p90_us",
//        "p95_us", "p99_us", "p999_us", "max_us", ...,
//        "window_rows": [{"window": i, ...}], "workload_rows": [{"workload": k,
//        "name": ..., ...}]}], "search": {...}, totals...}
//        Each step has the StepColumns() that have a value for it; a window
//        row has every window of the step, a workload row each workload's
//        share of the reported windows (RowColumns()).
// CSV: a header line, then per step its step row, its window rows and its
// workload rows: "row" (step, window or workload), "step" (index), "index"
// (window or workload index), "name" (workload rows), "mode" ("concurrency",
// "rate" or "schedule"), then every StepColumns() entry, the same values as
// the JSON and empty where it has none (the other loop's level, server
// figures when not scraped, step-only fields on window and workload rows);
// errors_by_code as "CODE:n;CODE:n", booleans as true/false.
// Statistics of nothing (latency of a row without a success) are JSON null,
// CSV "n/a" and "n/a" on the console.
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

// One window of a step, or one workload's share of a step.
struct RowResult {
  int index = 0;
  std::string name;  // workload rows: the workload
  double duration_s = 0;
  int64_t requests = 0, errors = 0;
  std::map<std::string, int64_t> errors_by_code;
  double throughput_rps = 0, gbps = 0;
  LatencySummary latency;
  // Window rows only; negative: unknown.
  double server_queue_mean_us = -1, server_compute_mean_us = -1, server_requests = -1;
  double gpu_util_pct = -1, gpu_power_w = -1, gpu_memory_bytes = -1;
};

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
  // Means of the GPU gauges over the measured windows' scrapes; negative: unknown.
  double gpu_util_pct = -1, gpu_power_w = -1, gpu_memory_bytes = -1;
  // Open loop: sends fell more than the bound behind schedule, so the step
  // was ended early (and a sweep stops there).
  bool overloaded = false;
  bool schedule = false;  // open loop driven by a schedule file
  std::vector<RowResult> window_rows;    // every window, in order
  std::vector<RowResult> workload_rows;  // per workload, over the reported windows
};

// --search: the highest throughput whose p99 stayed under the bound.
struct SearchResult {
  double p99_bound_us = 0;
  bool found = false;
  int step = -1;  // index of the best step in RunReport::steps
  double level = 0, throughput_rps = 0, p99_us = 0;
};

struct RunReport {
  std::string mode;  // "concurrency", "rate" or "schedule"
  std::vector<std::string> workloads;
  std::vector<StepResult> steps;
  int64_t total_requests = 0;  // completed by the run, all steps, warm-up included
  int64_t total_errors = 0;
  int64_t wrong_answers = 0;
  int64_t setup_calls = 0;  // RPCs besides the load (ServerInfo, weights)
  double server_requests_delta = -1;  // requests metric over the whole run
  std::string first_wrong;  // message of the first wrong answer
  bool searched = false;
  SearchResult search;
};

// The per-step fields of both forms, in output order.
std::vector<std::string> StepColumns();
// The fields of window and workload rows (a subset of StepColumns()).
std::vector<std::string> RowColumns();
std::string ReportJson(const RunReport& r);
std::string ReportCsv(const RunReport& r);
std::string StepLine(const StepResult& s);  // one human-readable line
std::string SearchLine(const RunReport& r);  // the --search verdict
std::string JsonEscape(const std::string& s);

}  // namespace conv1d

#endif  // CONV1D_CLIENT_LOAD_REPORT_H_
