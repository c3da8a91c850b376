#include "client/load/protocol_runs.h"

#include <cstdio>
#include <fstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/load/load_transport.h"

namespace conv1d {
namespace {

std::string Row(const ProtocolRun& run, const std::string& workload, double level,
                double rps, const LatencySummary& lat, int64_t requests, int64_t errors,
                int64_t verified, int64_t wrong, double gbps) {
  auto num = [](double v, bool have) { return have ? absl::StrFormat("%.1f", v) : "n/a"; };
  const bool have = lat.count > 0;
  return absl::StrCat(run.protocol, ",", run.memory, ",", workload, ",",
                      absl::StrFormat("%g", level), ",", absl::StrFormat("%.1f", rps), ",",
                      num(lat.p50_us, have), ",", num(lat.p99_us, have), ",", requests, ",",
                      errors, ",", verified, ",", wrong, ",", absl::StrFormat("%.3f", gbps),
                      "\n");
}

}  // namespace

absl::StatusOr<std::vector<ProtocolRun>> RunProtocolMatrix(
    const LoadOptions& base, const std::vector<LabeledWorkloads>& sets,
    const std::vector<std::string>& protocols, const std::vector<std::string>& memories,
    Conv1dClient* client) {
  for (const std::string& p : protocols) {
    if (!IsLoadProtocol(p)) {
      return absl::InvalidArgumentError(absl::StrCat("--protocol: '", p, "' is not v1 or oip"));
    }
  }
  for (const std::string& m : memories) {
    if (!IsLoadMemory(m)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--memory: '", m, "' is not grpc or system"));
    }
  }
  std::vector<ProtocolRun> runs;
  for (const LabeledWorkloads& set : sets) {
    for (const std::string& memory : memories) {
      for (const std::string& protocol : protocols) {
        std::printf("== protocol %s, memory %s, workload %s\n", protocol.c_str(),
                    memory.c_str(), set.label.c_str());
        std::fflush(stdout);
        LoadOptions o = base;
        o.workloads = set.workloads;
        o.protocol = protocol;
        o.memory = memory;
        absl::StatusOr<std::unique_ptr<LoadRunner>> runner = LoadRunner::Create(o, client);
        if (!runner.ok()) return runner.status();
        absl::StatusOr<RunReport> report = (*runner)->Run();
        if (!report.ok()) return report.status();
        runs.push_back({set.label, protocol, memory, *std::move(report)});
      }
    }
  }
  return runs;
}

std::string ProtocolCsv(const std::vector<ProtocolRun>& runs) {
  std::string out =
      "protocol,memory,workload,concurrency,throughput_rps,p50_us,p99_us,requests,errors,"
      "verified,wrong,gbps\n";
  for (const ProtocolRun& run : runs) {
    for (const StepResult& s : run.report.steps) {
      if (run.report.workloads.size() <= 1) {
        absl::StrAppend(&out, Row(run, run.workload, s.level, s.throughput_rps, s.latency,
                                  s.requests, s.errors, s.verified, s.wrong, s.gbps));
        continue;
      }
      for (const RowResult& w : s.workload_rows) {
        absl::StrAppend(&out, Row(run, w.name, s.level, w.throughput_rps, w.latency,
                                  w.requests, w.errors, 0, 0, w.gbps));
      }
    }
  }
  return out;
}

std::string ProtocolJson(const std::vector<ProtocolRun>& runs) {
  std::string out = "{\"runs\": [";
  for (size_t i = 0; i < runs.size(); ++i) {
    const ProtocolRun& r = runs[i];
    absl::StrAppend(&out, i > 0 ? ", " : "", "{\"protocol\": \"", JsonEscape(r.protocol),
                    "\", \"memory\": \"", JsonEscape(r.memory), "\", \"workload\": \"",
                    JsonEscape(r.workload), "\", \"report\": ", ReportJson(r.report), "}");
  }
  absl::StrAppend(&out, "]}\n");
  return out;
}

int FinishProtocolRuns(const std::vector<ProtocolRun>& runs, const std::string& csv_path,
                       const std::string& json_path, bool allow_errors) {
  for (const auto& [path, text] : {std::pair{csv_path, ProtocolCsv(runs)},
                                   std::pair{json_path, ProtocolJson(runs)}}) {
    if (path.empty()) continue;
    std::ofstream f(path, std::ios::trunc);
    f << text;
    if (!f) {
      std::fprintf(stderr, "conv1d_load: cannot write %s\n", path.c_str());
      return 1;
    }
  }
  int64_t requests = 0, errors = 0, wrong = 0;
  std::string first;
  for (const ProtocolRun& r : runs) {
    requests += r.report.total_requests;
    errors += r.report.total_errors;
    wrong += r.report.wrong_answers;
    if (first.empty()) first = r.report.first_wrong;
  }
  std::printf("total: %lld requests, %lld errors, %lld wrong answers\n",
              static_cast<long long>(requests), static_cast<long long>(errors),
              static_cast<long long>(wrong));
  if (wrong > 0) {
    std::fprintf(stderr, "conv1d_load: wrong answers, first: %s\n", first.c_str());
    return 1;
  }
  return errors > 0 && !allow_errors ? 1 : 0;
}

}  // namespace conv1d
