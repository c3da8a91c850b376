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

bool IsSequenceParameter(absl::string_view name) {
  return name == "sequence_id" || name == "sequence_start" || name == "sequence_end";
}

}  // namespace

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
    if (IsSequenceParameter(name)) {
      return absl::UnimplementedError(StrCat(
          what, ": sequences are not served by the inference protocol frontend; carry the "
                "decode state in conv_state with model conv1d_update"));
    }
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
          op == Op::kBackward ? ", grad_weight_fp32" : ""));
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
