#include "client/load/report.h"

#include <cmath>

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

std::string ReportJson(const RunReport& r) {
  std::string j = absl::StrCat("{\n  \"tool\": \"conv1d_load\",\n  \"mode\": \"", r.mode,
                               "\",\n  \"workloads\": [");
  for (size_t i = 0; i < r.workloads.size(); ++i) {
    absl::StrAppend(&j, i ? ", " : "", "\"", JsonEscape(r.workloads[i]), "\"");
  }
  absl::StrAppend(&j, "],\n  \"steps\": [");
  for (size_t i = 0; i < r.steps.size(); ++i) {
    const StepResult& s = r.steps[i];
    std::string codes;
    for (const auto& [code, n] : s.errors_by_code) {
      absl::StrAppend(&codes, codes.empty() ? "" : ", ", "\"", code, "\": ", n);
    }
    absl::StrAppend(&j, i ? "," : "", "\n    {\"", s.closed_loop ? "concurrency" : "rate",
                    "\": ", Num(s.level), ", \"requests\": ", s.requests,
                    ", \"errors\": ", s.errors, ", \"errors_by_code\": {", codes, "}");
    absl::StrAppend(&j, ", \"throughput_rps\": ", Num(s.throughput_rps),
                    ", \"gbps\": ", Num(s.gbps), ", \"p50_us\": ", Num(s.latency.p50_us),
                    ", \"p90_us\": ", Num(s.latency.p90_us), ", \"p95_us\": ", Num(s.latency.p95_us),
                    ", \"p99_us\": ", Num(s.latency.p99_us), ", \"p999_us\": ", Num(s.latency.p999_us),
                    ", \"max_us\": ", Num(s.latency.max_us), ", \"mean_us\": ", Num(s.latency.mean_us));
    absl::StrAppend(&j, ", \"stable\": ", s.stable ? "true" : "false", ", \"windows\": ", s.windows,
                    ", \"window_s\": ", Num(s.window_s), ", \"sent_total\": ", s.sent_total,
                    ", \"completed_total\": ", s.completed_total, ", \"errors_total\": ", s.errors_total,
                    ", \"late_sends\": ", s.late_sends, ", \"max_late_us\": ", Num(s.max_late_us),
                    ", \"verified\": ", s.verified, ", \"wrong\": ", s.wrong,
                    ", \"verify_skipped\": ", s.verify_skipped);
    if (s.server_requests >= 0) {
      absl::StrAppend(&j, ", \"server_requests\": ", Num(s.server_requests));
    }
    if (s.server_queue_mean_us >= 0) {
      absl::StrAppend(&j, ", \"server_queue_mean_us\": ", Num(s.server_queue_mean_us));
    }
    if (s.server_compute_mean_us >= 0) {
      absl::StrAppend(&j, ", \"server_compute_mean_us\": ", Num(s.server_compute_mean_us));
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
  std::string c =
      "mode,level,requests,errors,errors_by_code,throughput_rps,gbps,p50_us,p90_us,p95_us,"
      "p99_us,p999_us,max_us,mean_us,stable,windows,sent_total,completed_total,late_sends,"
      "verified,wrong,server_queue_mean_us,server_compute_mean_us,server_requests\n";
  for (const StepResult& s : r.steps) {
    std::vector<std::string> codes;
    for (const auto& [code, n] : s.errors_by_code) codes.push_back(absl::StrCat(code, ":", n));
    auto opt = [](double v) { return v >= 0 ? Num(v) : std::string(); };
    absl::StrAppend(&c, s.closed_loop ? "concurrency" : "rate", ",", Num(s.level), ",",
                    s.requests, ",", s.errors, ",", absl::StrJoin(codes, ";"), ",",
                    Num(s.throughput_rps), ",", Num(s.gbps), ",", Num(s.latency.p50_us), ",",
                    Num(s.latency.p90_us), ",", Num(s.latency.p95_us), ",");
    absl::StrAppend(&c, Num(s.latency.p99_us), ",", Num(s.latency.p999_us), ",",
                    Num(s.latency.max_us), ",", Num(s.latency.mean_us), ",",
                    s.stable ? "1" : "0", ",", s.windows, ",", s.sent_total, ",",
                    s.completed_total, ",", s.late_sends, ",", s.verified, ",", s.wrong, ",",
                    opt(s.server_queue_mean_us), ",", opt(s.server_compute_mean_us), ",",
                    opt(s.server_requests), "\n");
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
