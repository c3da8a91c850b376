// Translation of an Open Inference Protocol ModelInferRequest into the same
// validated call a conv1d.v1 request becomes, and of the computed outputs
// back into a ModelInferResponse.
//
// The request's model picks the op; its inputs, by name, become the tensors
// of the matching conv1d.v1 request (weight and bias as inline weights, or
// the `weights_name` parameter for a registered set), its `activation`,
// `layout` and `grad_weight_fp32` parameters the request's fields, and the
// requested outputs the return_* flags. Tensor bytes are never copied: the
// conv1d.v1 message carries dtypes and shapes only, and the bytes stay where
// they arrived (raw_input_contents, typed fp32_contents, or a registered
// shared-memory region, Placement kSharedHost when page-locked, see
// shm_registry.h), recorded as DetachedTensors
// that validation.h reads. So both protocols share one validation, and a
// request of either becomes the same BatchKey and fuses with the other's.
//
// Outputs go into the response's raw_output_contents (sized once, written
// by the backend in place), or into a registered region when the output's
// parameters name one; outputs the op computes but the request did not ask
// for go to scratch memory owned by the call.
//
// Regions are resolved for the calling principal (`user`, shm_registry.h's
// Ownership): another principal's region is NOT_FOUND like an unregistered
// one (PERMISSION_DENIED for an admin).
//
// Errors are INVALID_ARGUMENT naming the input, output or parameter (NOT_FOUND
// for an unknown model or weight set or an unregistered region). Requests
// with sequence parameters go to oip_sequences.h, which uses the
// translation pieces below.
//
// Used by OipService. Not synchronized: an OipInferCall belongs to one call.
#ifndef CONV1D_SERVER_FRONTEND_OIP_REQUEST_H_
#define CONV1D_SERVER_FRONTEND_OIP_REQUEST_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "conv1d/v1/conv1d.pb.h"
#include "inference/grpc_predict_v2.pb.h"
#include "server/core/shm_registry.h"
#include "server/core/weight_registry.h"
#include "server/frontend/oip_models.h"
#include "server/frontend/oip_wire.h"
#include "server/frontend/validation.h"
#include "server/frontend/wire_tensors.h"

namespace conv1d {

struct OipOutput {
  Role role = Role::kY;
  bool returned = false;     // listed in the response
  bool empty_state = false;  // a width-1 state: [B,D,0], no bytes
  bool shared = false;       // written into `span`
  SharedSpan span;
  std::string region;        // the region's name, when shared
};

struct OipInferCall {
  const OipModel* model = nullptr;
  // The conv1d.v1 request of the model's op (only that one is used).
  v1::ForwardRequest forward;
  v1::BackwardRequest backward;
  v1::UpdateRequest update;
  DetachedTensors inputs;
  ValidatedCall valid;
  // In response order: the requested outputs (or the defaults), then the
  // computed but unrequested ones.
  std::vector<OipOutput> outputs;
  std::vector<std::unique_ptr<char[]>> scratch;
  // The shared-memory regions this call uses (SharedSpan::lease): cleared
  // before the client is answered.
  std::vector<std::shared_ptr<void>> leases;
};

// Translates and validates `request` into *call without allocating anything
// sized by the request. `shm` may be null (no region can be named); `raw`
// (may be null) holds raw_input_contents received outside the message
// (oip_wire.h). With `require_all_inputs` every input of the model must be
// sent. REQUIRES: `request` and `raw` outlive every use of call->valid's
// views.
absl::Status PrepareOipInfer(const inference::ModelInferRequest& request,
                             const RawBuffers* raw, const WeightRegistry& registry,
                             const SharedMemoryRegistry* shm, const RegionUser& user,
                             const ValidationLimits& limits, bool require_all_inputs,
                             OipInferCall* call);

// Which inputs a translation takes: a stateless request's (every required
// input of the model), a sequence's first request's (x required; weights,
// bias, conv_state optional: oip_sequences.h), or a later request of a
// sequence (x only).
enum class OipInputRule { kStateless, kSequenceStart, kSequenceStep };

// For oip_sequences.h: the inputs of a conv1d_update request with sequence
// parameters into call->update and call->inputs (model set; not validated
// as an update), per `rule`; `weights_name` as ApplyParameters returned it.
absl::Status TranslateOipSequenceInputs(const inference::ModelInferRequest& request,
                                        const RawBuffers* raw,
                                        const SharedMemoryRegistry* shm,
                                        const RegionUser& user,
                                        const std::string& weights_name, OipInputRule rule,
                                        OipInferCall* call);
// The outputs of a sequence's request: y (the default), and conv_state_out
// when requested, in the response or a region. REQUIRES: call->valid.key
// and the segment's y and conv_state_out outputs (dtype, shape, bytes; the
// latter empty unless requested) set.
absl::Status PrepareOipSequenceOutputs(const inference::ModelInferRequest& request,
                                       const SharedMemoryRegistry* shm,
                                       const RegionUser& user, OipInferCall* call);

// Where BindOipOutputs puts returned outputs of at least `min_bytes` (>= 0;
// < 0: none): in memory from `allocate`, recorded in `raw` by
// raw_output_contents index, for SerializeInferResponse.
struct OipOutputBuffers {
  int64_t min_bytes = -1;
  HostAllocator allocate;
  RawBuffers* raw = nullptr;
};

// Fills the response's header and output list, and points every output of
// call->valid.segment at its storage (a raw_output_contents entry, a host
// buffer per `buffers` (may be null), a region, or scratch).
// REQUIRES: PrepareOipInfer(request, ...) returned OK.
void BindOipOutputs(const inference::ModelInferRequest& request, OipInferCall* call,
                    inference::ModelInferResponse* response,
                    const OipOutputBuffers* buffers = nullptr);

// A validation error of the conv1d.v1 request (or session) in the
// protocol's terms: the same tensors are inputs here ("weight", not
// "inline_weights.weight").
absl::Status InOipTerms(const absl::Status& s);

// The conv1d.v1 request `call` was translated into (for log lines); null
// before the model is known.
const google::protobuf::Message* TranslatedRequest(const OipInferCall* call);

}  // namespace conv1d

#endif  // CONV1D_SERVER_FRONTEND_OIP_REQUEST_H_
