// Parameters of Open Inference Protocol requests: typed reads of
// InferParameter values, a tensor's shared-memory reference
// (shared_memory_region / _offset / _byte_size), and the request-level
// parameters of the conv1d models (activation, layout, weights_name,
// grad_weight_fp32) applied to the matching conv1d.v1 request, and the
// sequence parameters of conv1d_update.
//
// Used by oip_request.cc. Pure functions; safe from any thread.
#ifndef CONV1D_SERVER_FRONTEND_OIP_PARAMS_H_
#define CONV1D_SERVER_FRONTEND_OIP_PARAMS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "conv1d/v1/conv1d.pb.h"
#include "inference/grpc_predict_v2.pb.h"
#include "server/core/conv_problem.h"

namespace conv1d {

using OipParams = google::protobuf::Map<std::string, inference::InferParameter>;

// INVALID_ARGUMENT naming `what` when the value has another type.
absl::StatusOr<std::string> StringParam(const inference::InferParameter& p,
                                        absl::string_view what);
// int64_param, or a uint64_param that fits.
absl::StatusOr<int64_t> IntParam(const inference::InferParameter& p,
                                 absl::string_view what);
absl::StatusOr<bool> BoolParam(const inference::InferParameter& p, absl::string_view what);

// A tensor's shared_memory_* parameters.
struct ShmRef {
  bool present = false;
  std::string region;
  int64_t offset = 0;
  int64_t byte_size = 0;
};

// `what` names the tensor ("input 'x'"). The region needs a byte size; the
// offset defaults to 0; an offset or size without a region is an error.
absl::Status ParseShmRef(const OipParams& params, absl::string_view what, ShmRef* ref);

// The sequence parameters of a conv1d_update request (docs/triton.md,
// "Sequences"): the sequence's id and its flags, and the decode-session
// settings a sequence's first request may give.
struct OipSequenceParams {
  bool present = false;  // sequence_id given (nonzero / non-empty)
  // Table key: "i<int>" or "s<string>" (an integer id and a string id never
  // name the same sequence); `display` as errors quote it: 7 or "abc".
  std::string key;
  std::string display;
  bool start = false;
  bool end = false;
  int64_t state_len = -1;          // -1: not given
  int64_t max_draft_tokens = -1;   // -1: not given
  int64_t accepted_tokens = -1;    // -1: not given
};

// True when any parameter of the sequence family is present: sequence_id,
// sequence_start, sequence_end, state_len, max_draft_tokens,
// accepted_tokens.
bool IsSequenceParameter(absl::string_view name);
bool HasSequenceParameters(const inference::ModelInferRequest& request);

// Reads the sequence family into *out. INVALID_ARGUMENT naming the
// parameter: any of them on a model other than conv1d_update, a flag or
// setting without sequence_id, an id of 0 or "", a value of the wrong type,
// a negative setting, accepted_tokens with sequence_start. OK with
// out->present false when there are none.
absl::Status ParseSequenceParams(const inference::ModelInferRequest& request, Op op,
                                 OipSequenceParams* out);

// Applies the request's parameters to the conv1d.v1 request of `op` (the
// other two are untouched) and returns a weights_name in *weights_name.
// Unknown parameters are INVALID_ARGUMENT; `priority`, `timeout` and those
// starting with `triton_` are accepted and change nothing; the sequence
// family is left to ParseSequenceParams.
absl::Status ApplyParameters(const inference::ModelInferRequest& request, Op op,
                             v1::ForwardRequest* forward, v1::BackwardRequest* backward,
                             v1::UpdateRequest* update, std::string* weights_name);

}  // namespace conv1d

#endif  // CONV1D_SERVER_FRONTEND_OIP_PARAMS_H_
