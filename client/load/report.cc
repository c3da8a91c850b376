#include "client/load/report.h"

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
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
          "stable", "overloaded", "windows", "window_s", "measured_s", "sent_total",
          "completed_total", "errors_total", "late_sends", "max_late_us", "verified", "wrong",
          "verify_skipped", "server_requests", "server_queue_mean_us", "server_compute_mean_us",
          "gpu_util_pct", "gpu_power_w", "gpu_memory_bytes"};
}

std::vector<std::string> RowColumns() {
  return {"requests", "errors", "errors_by_code", "throughput_rps", "gbps", "p50_us",
          "p90_us", "p95_us", "p99_us", "p999_us", "max_us", "mean_us", "measured_s",
          "server_requests", "server_queue_mean_us", "server_compute_mean_us",
          "gpu_util_pct", "gpu_power_w", "gpu_memory_bytes"};
}

namespace {

std::string Codes(const std::map<std::string, int64_t>& by_code) {
  std::string codes;
  for (const auto& [code, n] : by_code) {
    absl::StrAppend(&codes, codes.empty() ? "" : ", ", "\"", code, "\": ", n);
  }
  return absl::StrCat("{", codes, "}");
}

// Latency figures as JSON text: null when there was no success to measure.
void PutLatency(const LatencySummary& l, std::map<std::string, std::string>* v) {
  auto put = [&](const char* k, double x) { (*v)[k] = l.count > 0 ? Num(x) : "null"; };
  put("p50_us", l.p50_us);
  put("p90_us", l.p90_us);
  put("p95_us", l.p95_us);
  put("p99_us", l.p99_us);
  put("p999_us", l.p999_us);
  put("max_us", l.max_us);
  put("mean_us", l.mean_us);
}

void PutKnown(const char* key, double x, std::map<std::string, std::string>* v) {
  if (x < 0) return;
  // Byte counts in full; other figures to 6 significant digits.
  (*v)[key] = absl::EndsWith(key, "_bytes") && std::isfinite(x) ? absl::StrFormat("%.0f", x)
                                                                 : Num(x);
}

// A step's or a row's values by column, as JSON text; a column without a
// value (the other loop's level, server figures when not scraped) is absent.
// The JSON objects and the CSV rows are both written from these, so they
// cannot drift.
std::map<std::string, std::string> StepValues(const StepResult& s) {
  std::map<std::string, std::string> v;
  v[s.closed_loop ? "concurrency" : "rate"] = Num(s.level);
  v["requests"] = absl::StrCat(s.requests);
  v["errors"] = absl::StrCat(s.errors);
  v["errors_by_code"] = Codes(s.errors_by_code);
  v["throughput_rps"] = Num(s.throughput_rps);
  v["gbps"] = Num(s.gbps);
  PutLatency(s.latency, &v);
  v["stable"] = s.stable ? "true" : "false";
  v["overloaded"] = s.overloaded ? "true" : "false";
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
  PutKnown("server_requests", s.server_requests, &v);
  PutKnown("server_queue_mean_us", s.server_queue_mean_us, &v);
  PutKnown("server_compute_mean_us", s.server_compute_mean_us, &v);
  PutKnown("gpu_util_pct", s.gpu_util_pct, &v);
  PutKnown("gpu_power_w", s.gpu_power_w, &v);
  PutKnown("gpu_memory_bytes", s.gpu_memory_bytes, &v);
  return v;
}

std::map<std::string, std::string> RowValues(const RowResult& r) {
  std::map<std::string, std::string> v;
  v["requests"] = absl::StrCat(r.requests);
  v["errors"] = absl::StrCat(r.errors);
  v["errors_by_code"] = Codes(r.errors_by_code);
  v["throughput_rps"] = Num(r.throughput_rps);
  v["gbps"] = Num(r.gbps);
  PutLatency(r.latency, &v);
  v["measured_s"] = Num(r.duration_s);
  PutKnown("server_requests", r.server_requests, &v);
  PutKnown("server_queue_mean_us", r.server_queue_mean_us, &v);
  PutKnown("server_compute_mean_us", r.server_compute_mean_us, &v);
  PutKnown("gpu_util_pct", r.gpu_util_pct, &v);
  PutKnown("gpu_power_w", r.gpu_power_w, &v);
  PutKnown("gpu_memory_bytes", r.gpu_memory_bytes, &v);
  return v;
}

// A JSON value as a CSV cell: no quotes or commas, so no CSV quoting needed.
std::string CsvCell(const std::string& column, const std::string& json) {
  if (json == "null") return "n/a";
  if (column != "errors_by_code") return json;
  // {"CODE": n, "CODE": n} -> CODE:n;CODE:n
  std::string out;
  for (char c : json) {
    if (c == '{' || c == '}' || c == '"' || c == ' ') continue;
    out += c == ',' ? ';' : c;
  }
  return out;
}

std::string CsvSafe(std::string s) {
  for (char& c : s) {
    if (c == ',' || c == '"' || c == '\n') c = ';';
  }
  return s;
}

void AppendObject(const std::vector<std::string>& columns,
                  const std::map<std::string, std::string>& values, std::string* j) {
  bool first = true;
  for (const std::string& column : columns) {
    auto it = values.find(column);
    if (it == values.end()) continue;
    absl::StrAppend(j, first ? "" : ", ", "\"", column, "\": ", it->second);
    first = false;
  }
}

std::string ModeOf(const StepResult& s) {
  return s.closed_loop ? "concurrency" : s.schedule ? "schedule" : "rate";
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
  const std::vector<std::string> row_columns = RowColumns();
  for (size_t i = 0; i < r.steps.size(); ++i) {
    const StepResult& step = r.steps[i];
    absl::StrAppend(&j, i ? "," : "", "\n    {");
    AppendObject(columns, StepValues(step), &j);
    absl::StrAppend(&j, ",\n     \"window_rows\": [");
    for (size_t k = 0; k < step.window_rows.size(); ++k) {
      absl::StrAppend(&j, k ? ",\n       " : "\n       ", "{\"window\": ",
                      step.window_rows[k].index, ", ");
      AppendObject(row_columns, RowValues(step.window_rows[k]), &j);
      absl::StrAppend(&j, "}");
    }
    absl::StrAppend(&j, "],\n     \"workload_rows\": [");
    for (size_t k = 0; k < step.workload_rows.size(); ++k) {
      const RowResult& w = step.workload_rows[k];
      absl::StrAppend(&j, k ? ",\n       " : "\n       ", "{\"workload\": ", w.index,
                      ", \"name\": \"", JsonEscape(w.name), "\", ");
      AppendObject(row_columns, RowValues(w), &j);
      absl::StrAppend(&j, "}");
    }
    absl::StrAppend(&j, "]}");
  }
  absl::StrAppend(&j, "\n  ],\n  \"total_requests\": ", r.total_requests,
                  ",\n  \"total_errors\": ", r.total_errors,
                  ",\n  \"wrong_answers\": ", r.wrong_answers,
                  ",\n  \"setup_calls\": ", r.setup_calls);
  if (r.server_requests_delta >= 0) {
    absl::StrAppend(&j, ",\n  \"server_requests_delta\": ", Num(r.server_requests_delta));
  }
  if (r.searched) {
    const SearchResult& s = r.search;
    absl::StrAppend(&j, ",\n  \"search\": {\"p99_bound_us\": ", Num(s.p99_bound_us),
                    ", \"found\": ", s.found ? "true" : "false");
    if (s.found) {
      absl::StrAppend(&j, ", \"step\": ", s.step, ", \"", r.mode, "\": ", Num(s.level),
                      ", \"throughput_rps\": ", Num(s.throughput_rps),
                      ", \"p99_us\": ", Num(s.p99_us));
    }
    absl::StrAppend(&j, "}");
  }
  if (!r.first_wrong.empty()) {
    absl::StrAppend(&j, ",\n  \"first_wrong\": \"", JsonEscape(r.first_wrong), "\"");
  }
  absl::StrAppend(&j, "\n}\n");
  return j;
}

std::string ReportCsv(const RunReport& r) {
  const std::vector<std::string> columns = StepColumns();
  std::string c = absl::StrCat("row,step,index,name,mode,", absl::StrJoin(columns, ","), "\n");
  auto add_row = [&](const std::string& kind, size_t step, const std::string& index,
                     const std::string& name, const std::string& mode,
                     const std::map<std::string, std::string>& values) {
    std::vector<std::string> row = {kind, absl::StrCat(step), index, CsvSafe(name), mode};
    for (const std::string& column : columns) {
      auto it = values.find(column);
      row.push_back(it == values.end() ? "" : CsvCell(column, it->second));
    }
    absl::StrAppend(&c, absl::StrJoin(row, ","), "\n");
  };
  for (size_t i = 0; i < r.steps.size(); ++i) {
    const StepResult& s = r.steps[i];
    add_row("step", i, "", "", ModeOf(s), StepValues(s));
    for (const RowResult& w : s.window_rows) {
      add_row("window", i, absl::StrCat(w.index), "", ModeOf(s), RowValues(w));
    }
    for (const RowResult& w : s.workload_rows) {
      add_row("workload", i, absl::StrCat(w.index), w.name, ModeOf(s), RowValues(w));
    }
  }
  return c;
}

namespace {
std::string Us(const LatencySummary& l, double v) {
  return l.count > 0 ? absl::StrFormat("%9.1f", v) : absl::StrFormat("%9s", "n/a");
}
}  // namespace

std::string StepLine(const StepResult& s) {
  const LatencySummary& l = s.latency;
  std::string line = absl::StrFormat(
      "%s %-8s %9.1f req/s %8.3f GB/s  p50 %s  p90 %s  p99 %s  p99.9 %s  max %s us"
      "  errors %lld%s%s",
      ModeOf(s), Num(s.level), s.throughput_rps, s.gbps, Us(l, l.p50_us), Us(l, l.p90_us),
      Us(l, l.p99_us), Us(l, l.p999_us), Us(l, l.max_us), static_cast<long long>(s.errors),
      s.stable ? "" : "  (unstable)", s.overloaded ? "  OVERLOADED (ended early)" : "");
  for (const auto& [code, n] : s.errors_by_code) absl::StrAppend(&line, " ", code, "=", n);
  if (s.server_queue_mean_us >= 0 || s.server_compute_mean_us >= 0) {
    auto fig = [](double v) { return v >= 0 ? absl::StrFormat("%.1f", v) : std::string("n/a"); };
    absl::StrAppend(&line, "  server queue ", fig(s.server_queue_mean_us), " us compute ",
                    fig(s.server_compute_mean_us), " us");
  }
  if (s.gpu_util_pct >= 0) absl::StrAppend(&line, absl::StrFormat("  gpu %.0f %%", s.gpu_util_pct));
  if (s.gpu_power_w >= 0) absl::StrAppend(&line, absl::StrFormat(" %.0f W", s.gpu_power_w));
  if (s.gpu_memory_bytes >= 0) {
    absl::StrAppend(&line, absl::StrFormat(" %.2f GB", s.gpu_memory_bytes / 1e9));
  }
  if (!s.closed_loop) absl::StrAppend(&line, "  late ", s.late_sends);
  if (s.verified > 0 || s.wrong > 0) absl::StrAppend(&line, "  verified ", s.verified, " wrong ", s.wrong);
  return line;
}

std::string SearchLine(const RunReport& r) {
  const SearchResult& s = r.search;
  if (!s.found) {
    return absl::StrFormat("search: no step kept p99 under %.3f ms without errors",
                           s.p99_bound_us / 1e3);
  }
  return absl::StrFormat(
      "search: best %s %s: %.1f req/s with p99 %.1f us (bound %.3f ms)", r.mode,
      Num(s.level), s.throughput_rps, s.p99_us, s.p99_bound_us / 1e3);
}

}  // namespace conv1d
