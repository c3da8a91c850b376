// conv1d_load's protocol comparison (--protocol, --memory): the same
// workloads driven through each protocol (conv1d.v1, the inference
// protocol) and each memory kind (tensor bytes in gRPC messages, or in a
// registered shared-memory region), one LoadRunner run per combination
// against the same server, and their results as rows
// `protocol,memory,workload,concurrency,throughput_rps,p50_us,p99_us,...`.
//
// Used by client/load/main.cc. RunProtocolMatrix blocks; plain values.
#ifndef CONV1D_CLIENT_LOAD_PROTOCOL_RUNS_H_
#define CONV1D_CLIENT_LOAD_PROTOCOL_RUNS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/conv1d_client.h"
#include "client/load/load_runner.h"
#include "client/load/report.h"

namespace conv1d {

// A workload set measured on its own: its label (a preset name, or the
// workload's description) and its workloads.
struct LabeledWorkloads {
  std::string label;
  std::vector<WorkloadSpec> workloads;
};

struct ProtocolRun {
  std::string workload, protocol, memory;
  RunReport report;
};

// For each workload set, memory and protocol (in that nesting, so that the
// protocols of one memory run back to back): `base` with those workloads,
// protocol and memory, run to the end. INVALID_ARGUMENT naming --protocol
// or --memory for an unknown value; a run's own error stops the matrix.
absl::StatusOr<std::vector<ProtocolRun>> RunProtocolMatrix(
    const LoadOptions& base, const std::vector<LabeledWorkloads>& sets,
    const std::vector<std::string>& protocols, const std::vector<std::string>& memories,
    Conv1dClient* client);

// Header "protocol,memory,workload,concurrency,throughput_rps,p50_us,p99_us,
// requests,errors,verified,wrong,gbps", then a row per run and step (per
// workload of a step when a run mixes several, named by its description).
std::string ProtocolCsv(const std::vector<ProtocolRun>& runs);
// {"runs": [{"protocol", "memory", "workload", "report": <ReportJson>}]}.
std::string ProtocolJson(const std::vector<ProtocolRun>& runs);

// Writes the CSV and JSON (when their paths are not empty), prints the
// totals, and returns the exit status: 1 for a wrong answer, or a failed
// request unless `allow_errors`; 1 also when a file cannot be written.
int FinishProtocolRuns(const std::vector<ProtocolRun>& runs, const std::string& csv_path,
                       const std::string& json_path, bool allow_errors);

}  // namespace conv1d

#endif  // CONV1D_CLIENT_LOAD_PROTOCOL_RUNS_H_
