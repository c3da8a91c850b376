// Validation of the wire requests of conv1d.v1 and their translation into the
// core's BatchKey and ConvSegment (DESIGN §3, step 1).
//
// Used by the gRPC handlers (conv1d_service.cc, and oip_request.cc, which
// translates inference-protocol requests into these messages) and by tests.
// Validation reads only the request's fields and sizes, never allocates
// anything sized by the request, and builds input views that point INTO the
// received message, or into the host buffers or shared-memory regions its
// tensors' bytes are in (wire_tensors.h; no copies). Only after a request is valid does Bind*Response size the
// response's bytes fields or output buffers (the one request-sized
// allocation) and point the segment's outputs into them.
//
// Rules (every failure is INVALID_ARGUMENT naming the field, unless noted):
//   - tensors: dtype set and known, exact rank, every dim >= 1, element and
//     byte counts fit in int64, data holds exactly product(shape)*sizeof bytes;
//   - x [B,D,L] (channel-first) or [B,L,D] (channel-last); dout equals x in
//     dtype and shape; weight [D,W] with D of x and 1 <= W <= max_width; bias
//     [D] with the weight's dtype; initial_states / dfinal_states [B,D,W-1]
//     with x's dtype; conv_state [B,D,K], K >= max(W-1, 1), x's dtype;
//   - registered weights are looked up by name (NOT_FOUND names it);
//   - the request's bytes moved (inputs plus outputs) are at most
//     max_request_bytes (checked by CheckRequestSize, INVALID_ARGUMENT).
// Width 1: the states have 0 columns. initial_states / dfinal_states may be
// omitted or sent as [B,D,0] with empty data (both mean "no state"); asked-for
// final_states / dinitial_states come back as [B,D,0] tensors with no data.
// The backend never sees 0-column states.
//
// Pure functions over their arguments; safe from any thread as long as the
// messages are not modified concurrently.
#ifndef CONV1D_SERVER_FRONTEND_VALIDATION_H_
#define CONV1D_SERVER_FRONTEND_VALIDATION_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "conv1d/v1/conv1d.pb.h"
#include "server/core/conv_problem.h"
#include "server/core/dtype.h"
#include "server/core/weight_registry.h"
#include "server/frontend/wire_tensors.h"

namespace conv1d {

struct ValidationLimits {
  // Upper bound of ValidatedCall::total_bytes; >= 1.
  int64_t max_request_bytes = int64_t{1} << 30;
  // Largest kernel width accepted, 1..kMaxWidth.
  int32_t max_width = kMaxWidth;
};

// A compute request that passed validation.
struct ValidatedCall {
  BatchKey key;
  // Inputs point into the request, its detached buffers (which their views
  // own a reference to) or the registered weight set; outputs carry dtype,
  // shape and bytes but no storage until Bind*Response.
  ConvSegment segment;
  // The registered set the request named; null for inline weights. Holding
  // it keeps the weight views valid even if the set is replaced meanwhile.
  std::shared_ptr<const WeightSet> weights;
  // Bytes of every input plus every output, the figure the limit applies to.
  int64_t total_bytes = 0;
  // Width-1 calls asked for final_states / dinitial_states: answered as empty
  // [B,D,0] tensors by the frontend, not by the backend.
  bool empty_states_out = false;
};

// `detached` (may be null) holds the data of request tensors received
// outside the message (ParseWithDetachedData).
absl::Status ValidateForward(const v1::ForwardRequest& request,
                             const WeightRegistry& registry,
                             const ValidationLimits& limits,
                             ValidatedCall* call,
                             const DetachedTensors* detached = nullptr);
absl::Status ValidateBackward(const v1::BackwardRequest& request,
                              const WeightRegistry& registry,
                              const ValidationLimits& limits,
                              ValidatedCall* call,
                              const DetachedTensors* detached = nullptr);
absl::Status ValidateUpdate(const v1::UpdateRequest& request,
                            const WeightRegistry& registry,
                            const ValidationLimits& limits,
                            ValidatedCall* call,
                            const DetachedTensors* detached = nullptr);

// INVALID_ARGUMENT when call.total_bytes > limits.max_request_bytes.
absl::Status CheckRequestSize(const ValidatedCall& call,
                              const ValidationLimits& limits);

// Where Bind*Response puts outputs of at least `min_bytes` (>= 0; < 0: none):
// in memory from `allocate`, recorded in `detached` for
// SerializeWithDetachedData, instead of the response's own data strings.
struct OutputBuffers {
  int64_t min_bytes = -1;
  HostAllocator allocate;
  DetachedTensors* detached = nullptr;
};

// Sizes the response's tensors and points call->segment's outputs at them:
// at their data strings, or at detached buffers per `buffers` (may be null).
// REQUIRES: `call` came from the matching Validate* of the same request.
void BindForwardResponse(ValidatedCall* call, v1::ForwardResponse* response,
                         const OutputBuffers* buffers = nullptr);
void BindBackwardResponse(ValidatedCall* call, v1::BackwardResponse* response,
                          const OutputBuffers* buffers = nullptr);
void BindUpdateResponse(ValidatedCall* call, v1::UpdateResponse* response,
                        const OutputBuffers* buffers = nullptr);

// RegisterWeights: the name (WeightRegistry::ValidateName), weight [D,W]
// with 1 <= W <= max_width, optional bias [D] of the weight's dtype.
struct ValidatedWeights {
  DType dtype = DType::kF32;
  int64_t dim = 0;
  int32_t width = 0;
  bool has_bias = false;
};
absl::Status ValidateRegisterWeights(const v1::RegisterWeightsRequest& request,
                                     const ValidationLimits& limits,
                                     ValidatedWeights* weights);

// Wire <-> core enums. FromWireDType fails (INVALID_ARGUMENT naming `field`)
// for DTYPE_UNSPECIFIED and unknown values.
absl::StatusOr<DType> FromWireDType(int wire, absl::string_view field);
v1::DType ToWireDType(DType dtype);

}  // namespace conv1d

#endif  // CONV1D_SERVER_FRONTEND_VALIDATION_H_
