#include "server/frontend/oip_params.h"

#include <limits>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/frontend/oip_models.h"

namespace conv1d {
namespace {

using ::absl::InvalidArgumentError;
using ::absl::StrCat;

// Parameters of Triton's protocol that change nothing here: scheduling
// hints, and the `triton_` ones clients add (perf_analyzer sends
// triton_enable_empty_final_response).
bool IsIgnoredParameter(absl::string_view name) {
  return name == "priority" || name == "timeout" || absl::StartsWith(name, "triton_");
}

}  // namespace

bool IsSequenceParameter(absl::string_view name) {
  return name == kParamSequenceId || name == kParamSequenceStart ||
         name == kParamSequenceEnd || name == kParamStateLen ||
         name == kParamMaxDraftTokens || name == kParamAcceptedTokens;
}

bool HasSequenceParameters(const inference::ModelInferRequest& request) {
  for (const auto& [name, value] : request.parameters()) {
    if (IsSequenceParameter(name)) return true;
  }
  return false;
}

absl::Status ParseSequenceParams(const inference::ModelInferRequest& request, Op op,
                                 OipSequenceParams* out) {
  *out = OipSequenceParams();
  const OipParams& params = request.parameters();
  // sequence_id, else the first sequence parameter by name: a stable name
  // for the error.
  std::string first;
  for (const auto& [name, value] : params) {
    if (IsSequenceParameter(name) && (first.empty() || name < first)) first = name;
  }
  if (params.contains(kParamSequenceId)) first = kParamSequenceId;
  if (first.empty()) return absl::OkStatus();
  if (op != Op::kUpdate) {
    return InvalidArgumentError(StrCat(
        "parameter '", first, "': sequences are served by model conv1d_update only (a "
        "sequence is a decode session); this request is for model ", request.model_name()));
  }
  auto id = params.find(kParamSequenceId);
  if (id == params.end()) {
    return InvalidArgumentError(StrCat("parameter '", first, "' needs parameter '",
                                       kParamSequenceId, "' (the sequence it belongs to)"));
  }
  const std::string what = StrCat("parameter '", kParamSequenceId, "'");
  if (id->second.parameter_choice_case() == inference::InferParameter::kStringParam) {
    if (id->second.string_param().empty()) {
      return InvalidArgumentError(StrCat(what, " is empty; a sequence needs an id"));
    }
    out->key = StrCat("s", id->second.string_param());
    out->display = StrCat("\"", id->second.string_param(), "\"");
  } else {
    absl::StatusOr<int64_t> v = IntParam(id->second, what);
    if (!v.ok()) {
      return InvalidArgumentError(StrCat(what, " must be an integer or a string"));
    }
    if (*v == 0) return InvalidArgumentError(StrCat(what, " is 0; a sequence needs a nonzero id"));
    out->key = StrCat("i", *v);
    out->display = StrCat(*v);
  }
  out->present = true;
  for (const auto& [name, value] : params) {
    const std::string pwhat = StrCat("parameter '", name, "'");
    if (name == kParamSequenceStart || name == kParamSequenceEnd) {
      absl::StatusOr<bool> v = BoolParam(value, pwhat);
      if (!v.ok()) return v.status();
      (name == kParamSequenceStart ? out->start : out->end) = *v;
    } else if (name == kParamStateLen || name == kParamMaxDraftTokens ||
               name == kParamAcceptedTokens) {
      absl::StatusOr<int64_t> v = IntParam(value, pwhat);
      if (!v.ok()) return v.status();
      if (*v < 0) return InvalidArgumentError(StrCat(pwhat, " is ", *v, ", expected >= 0"));
      if (name == kParamStateLen) out->state_len = *v;
      if (name == kParamMaxDraftTokens) out->max_draft_tokens = *v;
      if (name == kParamAcceptedTokens) out->accepted_tokens = *v;
    }
  }
  if (out->start && out->accepted_tokens >= 0) {
    return InvalidArgumentError(StrCat("parameter '", kParamAcceptedTokens,
                                       "': a sequence's first request has no earlier step "
                                       "to commit"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> StringParam(const inference::InferParameter& p,
                                        absl::string_view what) {
  if (p.parameter_choice_case() != inference::InferParameter::kStringParam) {
    return InvalidArgumentError(StrCat(what, " must be a string"));
  }
  return p.string_param();
}

absl::StatusOr<int64_t> IntParam(const inference::InferParameter& p,
                                 absl::string_view what) {
  switch (p.parameter_choice_case()) {
    case inference::InferParameter::kInt64Param: return p.int64_param();
    case inference::InferParameter::kUint64Param:
      if (p.uint64_param() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return static_cast<int64_t>(p.uint64_param());
      }
      return InvalidArgumentError(StrCat(what, " is ", p.uint64_param(),
                                         ", more than fits in int64"));
    default: return InvalidArgumentError(StrCat(what, " must be an integer"));
  }
}

absl::StatusOr<bool> BoolParam(const inference::InferParameter& p, absl::string_view what) {
  if (p.parameter_choice_case() != inference::InferParameter::kBoolParam) {
    return InvalidArgumentError(StrCat(what, " must be a bool"));
  }
  return p.bool_param();
}

absl::Status ParseShmRef(const OipParams& params, absl::string_view what, ShmRef* ref) {
  auto region = params.find(kParamShmRegion);
  auto offset = params.find(kParamShmOffset);
  auto size = params.find(kParamShmByteSize);
  if (region == params.end()) {
    if (offset != params.end() || size != params.end()) {
      return InvalidArgumentError(StrCat(what, ": ", kParamShmOffset, " or ",
                                         kParamShmByteSize, " without ", kParamShmRegion));
    }
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> name =
      StringParam(region->second, StrCat(what, ": parameter ", kParamShmRegion));
  if (!name.ok()) return name.status();
  if (size == params.end()) {
    return InvalidArgumentError(StrCat(what, ": ", kParamShmRegion, " without ",
                                       kParamShmByteSize));
  }
  absl::StatusOr<int64_t> bytes =
      IntParam(size->second, StrCat(what, ": parameter ", kParamShmByteSize));
  if (!bytes.ok()) return bytes.status();
  ref->offset = 0;
  if (offset != params.end()) {
    absl::StatusOr<int64_t> off =
        IntParam(offset->second, StrCat(what, ": parameter ", kParamShmOffset));
    if (!off.ok()) return off.status();
    ref->offset = *off;
  }
  ref->present = true;
  ref->region = *std::move(name);
  ref->byte_size = *bytes;
  return absl::OkStatus();
}

absl::Status ApplyParameters(const inference::ModelInferRequest& request, Op op,
                             v1::ForwardRequest* forward, v1::BackwardRequest* backward,
                             v1::UpdateRequest* update, std::string* weights_name) {
  int activation = v1::ACTIVATION_NONE;
  int layout = v1::LAYOUT_CHANNEL_FIRST;
  bool grad_weight_fp32 = false;
  for (const auto& [name, value] : request.parameters()) {
    const std::string what = StrCat("parameter '", name, "'");
    if (IsIgnoredParameter(name)) continue;
    if (IsSequenceParameter(name)) continue;  // ParseSequenceParams reads them
    if (name == kParamActivation) {
      absl::StatusOr<std::string> v = StringParam(value, what);
      if (!v.ok()) return v.status();
      const std::string lower = absl::AsciiStrToLower(*v);
      if (lower == "none" || lower == "identity") {
        activation = v1::ACTIVATION_NONE;
      } else if (lower == "silu" || lower == "swish") {
        activation = v1::ACTIVATION_SILU;
      } else {
        return InvalidArgumentError(StrCat(what, " is \"", *v, "\", expected none or silu"));
      }
    } else if (name == kParamLayout) {
      absl::StatusOr<std::string> v = StringParam(value, what);
      if (!v.ok()) return v.status();
      const std::string lower = absl::AsciiStrToLower(*v);
      if (lower == "channel_first" || lower == "bdl") {
        layout = v1::LAYOUT_CHANNEL_FIRST;
      } else if (lower == "channel_last" || lower == "bld") {
        layout = v1::LAYOUT_CHANNEL_LAST;
      } else {
        return InvalidArgumentError(
            StrCat(what, " is \"", *v, "\", expected channel_first or channel_last"));
      }
    } else if (name == kParamWeightsName) {
      absl::StatusOr<std::string> v = StringParam(value, what);
      if (!v.ok()) return v.status();
      *weights_name = *std::move(v);
    } else if (name == kParamGradWeightFp32 && op == Op::kBackward) {
      absl::StatusOr<bool> v = BoolParam(value, what);
      if (!v.ok()) return v.status();
      grad_weight_fp32 = *v;
    } else {
      return InvalidArgumentError(StrCat(
          what, " is not known; expected activation, layout, weights_name",
          op == Op::kBackward ? ", grad_weight_fp32" : "",
          op == Op::kUpdate ? ", or the sequence parameters sequence_id, sequence_start, "
                              "sequence_end, state_len, max_draft_tokens, accepted_tokens"
                            : ""));
    }
  }
  switch (op) {
    case Op::kForward:
      forward->set_activation(static_cast<v1::Activation>(activation));
      forward->set_layout(static_cast<v1::Layout>(layout));
      break;
    case Op::kBackward:
      backward->set_activation(static_cast<v1::Activation>(activation));
      backward->set_layout(static_cast<v1::Layout>(layout));
      backward->set_grad_weight_fp32(grad_weight_fp32);
      break;
    case Op::kUpdate:
      update->set_activation(static_cast<v1::Activation>(activation));
      update->set_layout(static_cast<v1::Layout>(layout));
      break;
  }
  return absl::OkStatus();
}

}  // namespace conv1d
