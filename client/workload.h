// Workloads of the command-line client and the load generator: what one
// request looks like (WorkloadSpec), named presets, text parsers for shapes,
// sweep levels and mix files, and builders of request messages filled with
// fresh seeded random data.
//
// Mix file: one workload per line, `key=value` tokens separated by spaces,
// `#` starts a comment. Keys are those of ApplyWorkloadKey, plus `weight`
// (relative share of the requests, default 1); `dtype=` also sets the
// weight dtype unless the line gives `weight_dtype=`. Example:
//   weight=3 preset=small-fwd
//   weight=1 op=bwd shape=4x2048x2048 dtype=bf16
//
// Plain values and pure functions: thread-safe.
#ifndef CONV1D_CLIENT_WORKLOAD_H_
#define CONV1D_CLIENT_WORKLOAD_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/host_tensor.h"
#include "conv1d/v1/conv1d.pb.h"

namespace conv1d {

enum class WorkloadOp { kForward = 0, kBackward = 1, kUpdate = 2 };
const char* WorkloadOpName(WorkloadOp op);  // "fwd", "bwd", "update"

struct WorkloadSpec {
  WorkloadOp op = WorkloadOp::kForward;
  DType dtype = DType::kF32;         // x, y, dout, dx, states
  DType weight_dtype = DType::kF32;  // weight, bias
  int64_t batch = 1;                 // B
  int64_t dim = 2048;                // D
  int64_t seqlen = 128;              // L (S new tokens for update)
  int32_t width = 4;                 // W
  bool silu = true;
  bool bias = true;
  bool channel_last = false;
  bool initial_states = false;          // fwd, bwd
  bool return_final_states = false;     // fwd
  bool dfinal_states = false;           // bwd
  bool return_dinitial_states = false;  // bwd
  bool grad_weight_fp32 = false;        // bwd
  int64_t state_len = 0;                // update: 0 means W-1
  bool registered_weights = false;
  std::string weights_name;             // registered set; empty: generated
  double mix_weight = 1.0;

  int64_t effective_state_len() const { return state_len > 0 ? state_len : width - 1; }
  // "fwd fp32/fp32 1x2048x128 W=4 silu bias cf inline"
  std::string Describe() const;
};

// Presets: decode-fwd, decode-update, small-fwd, large-fwd, large-bwd.
absl::StatusOr<WorkloadSpec> PresetWorkload(absl::string_view name);
std::vector<std::string> PresetNames();

// Sets one field from text. Keys: preset, op (fwd|bwd|update), shape (BxDxL),
// dtype, weight_dtype, width, activation (silu|none), bias, layout (cf|cl),
// initial_states, final_states, dfinal_states, dinitial_states, grad_fp32,
// state_len, weights (inline|registered), weights_name, weight (mix share).
// Booleans accept 1/0/true/false.
absl::Status ApplyWorkloadKey(absl::string_view key, absl::string_view value,
                              WorkloadSpec* spec);
absl::Status ParseShape(absl::string_view text, int64_t* b, int64_t* d, int64_t* l);

// Tensor bytes of one request of `spec` plus its response (inputs sent,
// outputs received), without allocating anything. INVALID_ARGUMENT naming the
// shape when a count overflows 64 bits or the request or the response exceeds
// `max_message_bytes` (the gRPC message limit the client was given), so that
// an impossible size is refused before a buffer is made for it.
absl::StatusOr<int64_t> CheckWorkloadBytes(const WorkloadSpec& spec, int64_t max_message_bytes);
absl::StatusOr<std::vector<WorkloadSpec>> ParseMix(absl::string_view text,
                                                   const WorkloadSpec& defaults);

// Sweep levels: "1,8,64" or "start:end:factor" (geometric, end included when
// reached exactly; factor > 1), e.g. "1:64:2" -> 1 2 4 8 16 32 64.
absl::StatusOr<std::vector<double>> ParseLevels(absl::string_view text);

struct WeightSet {
  HostTensor weight;  // [D, W] in spec.weight_dtype
  HostTensor bias;    // [D] or empty
};
WeightSet MakeWeights(const WorkloadSpec& spec, uint64_t seed);

// A ready-to-send request of one of the three ops (the other two null).
struct PreparedRequest {
  WorkloadOp op = WorkloadOp::kForward;
  std::shared_ptr<const v1::ForwardRequest> forward;
  std::shared_ptr<const v1::BackwardRequest> backward;
  std::shared_ptr<const v1::UpdateRequest> update;
  int64_t request_tensor_bytes = 0;  // every tensor payload in the message
  int spec_index = 0;
};

// Random x (and dout, states) from `seed`; weights inline from `weights`
// unless the spec uses registered weights, then by `spec.weights_name`.
PreparedRequest BuildRequest(const WorkloadSpec& spec, const WeightSet& weights,
                             uint64_t seed);

int64_t TensorPayloadBytes(const v1::ForwardResponse& r);
int64_t TensorPayloadBytes(const v1::BackwardResponse& r);
int64_t TensorPayloadBytes(const v1::UpdateResponse& r);

}  // namespace conv1d

#endif  // CONV1D_CLIENT_WORKLOAD_H_
