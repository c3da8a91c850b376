#include "client/load/report.h"

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace conv1d {

namespace {
std::string Num(double v) {
  if (!std::isfinite(v)) return "null";
  return absl::StrFormat("%.6g", v);
}
}  // namespace

std::string JsonEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out += c;
        }
    }
  }
  return out;
}

std::vector<std::string> StepColumns() {
  return {"concurrency", "rate", "requests", "errors", "errors_by_code", "throughput_rps",
          "gbps", "p50_us", "p90_us", "p95_us", "p99_us", "p999_us", "max_us", "mean_us",
          "stable", "windows", "window_s", "measured_s", "sent_total", "completed_total",
          "errors_total", "late_sends", "max_late_us", "verified", "wrong", "verify_skipped",
          "server_requests", "server_queue_mean_us", "server_compute_mean_us"};
}

namespace {

// One step's values by column, as JSON text; a column without a value (the
// other loop's level, server figures when not scraped) is absent. The JSON
// object and the CSV row are both written from this, so they cannot drift.
std::map<std::string, std::string> StepValues(const StepResult& s) {
  std::map<std::string, std::string> v;
  v[s.closed_loop ? "concurrency" : "rate"] = Num(s.level);
  v["requests"] = absl::StrCat(s.requests);
  v["errors"] = absl::StrCat(s.errors);
  std::string codes;
  for (const auto& [code, n] : s.errors_by_code) {
    absl::StrAppend(&codes, codes.empty() ? "" : ", ", "\"", code, "\": ", n);
  }
  v["errors_by_code"] = absl::StrCat("{", codes, "}");
  v["throughput_rps"] = Num(s.throughput_rps);
  v["gbps"] = Num(s.gbps);
  v["p50_us"] = Num(s.latency.p50_us);
  v["p90_us"] = Num(s.latency.p90_us);
  v["p95_us"] = Num(s.latency.p95_us);
  v["p99_us"] = Num(s.latency.p99_us);
  v["p999_us"] = Num(s.latency.p999_us);
  v["max_us"] = Num(s.latency.max_us);
  v["mean_us"] = Num(s.latency.mean_us);
  v["stable"] = s.stable ? "true" : "false";
  v["windows"] = absl::StrCat(s.windows);
  v["window_s"] = Num(s.window_s);
  v["measured_s"] = Num(s.measured_s);
  v["sent_total"] = absl::StrCat(s.sent_total);
  v["completed_total"] = absl::StrCat(s.completed_total);
  v["errors_total"] = absl::StrCat(s.errors_total);
  v["late_sends"] = absl::StrCat(s.late_sends);
  v["max_late_us"] = Num(s.max_late_us);
  v["verified"] = absl::StrCat(s.verified);
  v["wrong"] = absl::StrCat(s.wrong);
  v["verify_skipped"] = absl::StrCat(s.verify_skipped);
  if (s.server_requests >= 0) v["server_requests"] = Num(s.server_requests);
  if (s.server_queue_mean_us >= 0) v["server_queue_mean_us"] = Num(s.server_queue_mean_us);
  if (s.server_compute_mean_us >= 0) {
    v["server_compute_mean_us"] = Num(s.server_compute_mean_us);
  }
  return v;
}

// A JSON value as a CSV cell: no quotes or commas, so no CSV quoting needed.
std::string CsvCell(const std::string& column, const StepResult& s, const std::string& json) {
  if (column != "errors_by_code") return json == "null" ? "" : json;
  std::vector<std::string> codes;
  for (const auto& [code, n] : s.errors_by_code) codes.push_back(absl::StrCat(code, ":", n));
  return absl::StrJoin(codes, ";");
}

}  // namespace

std::string ReportJson(const RunReport& r) {
  std::string j = absl::StrCat("{\n  \"tool\": \"conv1d_load\",\n  \"mode\": \"", r.mode,
                               "\",\n  \"workloads\": [");
  for (size_t i = 0; i < r.workloads.size(); ++i) {
    absl::StrAppend(&j, i ? ", " : "", "\"", JsonEscape(r.workloads[i]), "\"");
  }
  absl::StrAppend(&j, "],\n  \"steps\": [");
  const std::vector<std::string> columns = StepColumns();
  for (size_t i = 0; i < r.steps.size(); ++i) {
    const std::map<std::string, std::string> values = StepValues(r.steps[i]);
    absl::StrAppend(&j, i ? "," : "", "\n    {");
    bool first = true;
    for (const std::string& column : columns) {
      auto it = values.find(column);
      if (it == values.end()) continue;
      absl::StrAppend(&j, first ? "" : ", ", "\"", column, "\": ", it->second);
      first = false;
    }
    absl::StrAppend(&j, "}");
  }
  absl::StrAppend(&j, "\n  ],\n  \"total_requests\": ", r.total_requests,
                  ",\n  \"total_errors\": ", r.total_errors,
                  ",\n  \"wrong_answers\": ", r.wrong_answers,
                  ",\n  \"setup_calls\": ", r.setup_calls);
  if (r.server_requests_delta >= 0) {
    absl::StrAppend(&j, ",\n  \"server_requests_delta\": ", Num(r.server_requests_delta));
  }
  if (!r.first_wrong.empty()) {
    absl::StrAppend(&j, ",\n  \"first_wrong\": \"", JsonEscape(r.first_wrong), "\"");
  }
  absl::StrAppend(&j, "\n}\n");
  return j;
}

std::string ReportCsv(const RunReport& r) {
  const std::vector<std::string> columns = StepColumns();
  std::string c = absl::StrCat("mode,", absl::StrJoin(columns, ","), "\n");
  for (const StepResult& s : r.steps) {
    const std::map<std::string, std::string> values = StepValues(s);
    std::vector<std::string> row = {s.closed_loop ? "concurrency" : "rate"};
    for (const std::string& column : columns) {
      auto it = values.find(column);
      row.push_back(it == values.end() ? "" : CsvCell(column, s, it->second));
    }
    absl::StrAppend(&c, absl::StrJoin(row, ","), "\n");
  }
  return c;
}

std::string StepLine(const StepResult& s) {
  std::string line = absl::StrFormat(
      "%s %-8s %9.1f req/s %8.3f GB/s  p50 %9.1f  p90 %9.1f  p99 %9.1f  p99.9 %9.1f  max %9.1f us"
      "  errors %lld%s",
      s.closed_loop ? "concurrency" : "rate", Num(s.level), s.throughput_rps, s.gbps,
      s.latency.p50_us, s.latency.p90_us, s.latency.p99_us, s.latency.p999_us,
      s.latency.max_us, static_cast<long long>(s.errors), s.stable ? "" : "  (unstable)");
  for (const auto& [code, n] : s.errors_by_code) absl::StrAppend(&line, " ", code, "=", n);
  if (s.server_queue_mean_us >= 0 || s.server_compute_mean_us >= 0) {
    absl::StrAppend(&line, absl::StrFormat("  server queue %.1f us compute %.1f us",
                                           s.server_queue_mean_us, s.server_compute_mean_us));
  }
  if (!s.closed_loop) absl::StrAppend(&line, "  late ", s.late_sends);
  if (s.verified > 0 || s.wrong > 0) absl::StrAppend(&line, "  verified ", s.verified, " wrong ", s.wrong);
  return line;
}

}  // namespace conv1d
