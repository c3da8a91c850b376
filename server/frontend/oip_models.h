// The models the Open Inference Protocol frontend serves, one per op:
// `conv1d_forward`, `conv1d_backward` and `conv1d_update`, version "1".
// Their inputs and outputs are the op's tensor roles (kernels/conv1d_roles.h)
// under the roles' wire names (x, weight, bias, initial_states, dout,
// dfinal_states, conv_state -> y, final_states, dx, dweight, dbias,
// dinitial_states, conv_state_out); every dim is variable (-1).
//
// Used by OipService (metadata, config, index) and oip_request.cc (which
// input names a request may send, which outputs it gets by default).
// Immutable tables and pure functions; safe from any thread.
#ifndef CONV1D_SERVER_FRONTEND_OIP_MODELS_H_
#define CONV1D_SERVER_FRONTEND_OIP_MODELS_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "inference/grpc_predict_v2.pb.h"
#include "kernels/conv1d_roles.h"
#include "server/core/conv_problem.h"
#include "server/core/dtype.h"

namespace conv1d {

inline constexpr char kOipModelVersion[] = "1";
inline constexpr char kOipPlatform[] = "conv1d";

// Request-level parameters a ModelInfer request may carry.
inline constexpr char kParamActivation[] = "activation";      // "none" | "silu"
inline constexpr char kParamLayout[] = "layout";  // "channel_first" | "channel_last"
inline constexpr char kParamWeightsName[] = "weights_name";   // a registered set
inline constexpr char kParamGradWeightFp32[] = "grad_weight_fp32";  // backward, bool
// Sequences (conv1d_update only; docs/triton.md, "Sequences").
inline constexpr char kParamSequenceId[] = "sequence_id";        // int64 or string
inline constexpr char kParamSequenceStart[] = "sequence_start";  // bool
inline constexpr char kParamSequenceEnd[] = "sequence_end";      // bool
inline constexpr char kParamStateLen[] = "state_len";            // int, at the start
inline constexpr char kParamMaxDraftTokens[] = "max_draft_tokens";  // int, at the start
inline constexpr char kParamAcceptedTokens[] = "accepted_tokens";   // int, commit
// Per-tensor parameters naming a registered system shared-memory region.
inline constexpr char kParamShmRegion[] = "shared_memory_region";
inline constexpr char kParamShmOffset[] = "shared_memory_offset";
inline constexpr char kParamShmByteSize[] = "shared_memory_byte_size";

struct OipModel {
  const char* name;
  Op op;
  std::vector<Role> inputs;   // every input the model takes, in order
  std::vector<Role> outputs;  // every output it can return, in order
};

// The three models, in the order conv1d_forward, conv1d_backward,
// conv1d_update.
absl::Span<const OipModel> OipModels();

// The model of `name`; null when there is none.
const OipModel* FindOipModel(absl::string_view name);

// Inputs a request must send (x; dout; conv_state).
bool IsRequiredInput(Op op, Role role);

// Outputs returned when a request lists none: the op's outputs without the
// optional states (final_states, dinitial_states), dbias only with a bias.
bool IsDefaultOutput(Role role, bool has_bias);

// "x, weight, bias, initial_states".
std::string RoleList(const std::vector<Role>& roles);

// The protocol's datatype names: "FP32", "FP16", "BF16".
const char* OipDTypeName(DType dtype);
// False for any other name.
bool ParseOipDType(absl::string_view name, DType* dtype);

void FillModelMetadata(const OipModel& model, inference::ModelMetadataResponse* out);
// How the server serves sequences (conv1d_update's sequence_batching).
struct OipSequenceConfig {
  bool served = false;         // the backend has decode sessions
  int64_t idle_timeout_s = 0;  // a sequence idle this long ends; 0: never
  int64_t max_sequences = 0;   // session slots
};

// `on_gpu`: the backend runs on GPUs (instance kind GPU, else CPU).
// `all_required`: no input is marked optional. With sequences served,
// conv1d_update reports sequence_batching (and conv_state optional: a
// sequence's start may omit it) instead of dynamic_batching.
void FillModelConfig(const OipModel& model, bool on_gpu, int64_t max_queue_delay_us,
                     bool all_required, const OipSequenceConfig& sequences,
                     inference::ModelConfig* out);

}  // namespace conv1d

#endif  // CONV1D_SERVER_FRONTEND_OIP_MODELS_H_
