#include "server/frontend/session_validation.h"

#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace conv1d {
namespace {

using ::absl::InvalidArgumentError;
using ::absl::StrCat;

template <typename Dims>
std::string ShapeString(const Dims& dims) {
  return StrCat("[", absl::StrJoin(dims, ","), "]");
}

// dtype `dtype`, rank `rank`, every dim >= 1, bytes matching; *view points
// into the message (or its detached bytes).
absl::Status CheckTensorOf(const v1::Tensor& t, const std::string& field, DType dtype,
                           int rank, absl::string_view dims_hint,
                           const DetachedTensors* detached, TensorView* view) {
  absl::StatusOr<DType> got = FromWireDType(t.dtype(), StrCat(field, ".dtype"));
  if (!got.ok()) return got.status();
  if (*got != dtype) {
    return InvalidArgumentError(StrCat(field, ".dtype is ", DTypeName(*got), ", expected ",
                                       DTypeName(dtype), " (the session's dtype)"));
  }
  if (t.shape_size() != rank) {
    return InvalidArgumentError(StrCat(field, ".shape ", ShapeString(t.shape()),
                                       " has rank ", t.shape_size(), ", expected rank ",
                                       rank, " ", dims_hint));
  }
  int64_t elements = 1;
  for (int i = 0; i < rank; ++i) {
    if (t.shape(i) < 1) {
      return InvalidArgumentError(StrCat(field, ".shape[", i, "] is ", t.shape(i),
                                         ", expected >= 1 (shape ", ShapeString(t.shape()),
                                         " ", dims_hint, ")"));
    }
    if (__builtin_mul_overflow(elements, t.shape(i), &elements)) {
      return InvalidArgumentError(StrCat(field, ".shape ", ShapeString(t.shape()),
                                         " has more elements than fit in int64"));
    }
  }
  int64_t bytes = 0;
  if (__builtin_mul_overflow(elements, DTypeSize(dtype), &bytes)) {
    return InvalidArgumentError(StrCat(field, ".shape ", ShapeString(t.shape()),
                                       " has more bytes than fit in int64"));
  }
  const DetachedTensors::Entry* moved = detached != nullptr ? detached->Find(&t) : nullptr;
  const int64_t received =
      moved != nullptr ? moved->bytes : static_cast<int64_t>(t.data().size());
  if (received != bytes) {
    return InvalidArgumentError(StrCat(field, ".data has ", received, " bytes, expected ",
                                       bytes, " (shape ", ShapeString(t.shape()), " ",
                                       DTypeName(dtype), ")"));
  }
  view->dtype = dtype;
  view->shape.assign(t.shape().begin(), t.shape().end());
  view->data = moved != nullptr ? moved->buffer.get() : t.data().data();
  view->owner = moved != nullptr ? moved->buffer : nullptr;
  view->bytes = bytes;
  return absl::OkStatus();
}

absl::Status ExpectDim(const std::string& field, int index, int64_t actual,
                       int64_t expected, absl::string_view what) {
  if (actual == expected) return absl::OkStatus();
  return InvalidArgumentError(StrCat(field, ".shape[", index, "] is ", actual,
                                     ", expected ", expected, " (", what, ")"));
}

// An activation tensor [B, D, L] / [B, L, D] of the spec's dtype, B and D.
absl::Status CheckActivation(const v1::Tensor& t, const std::string& field,
                             const SessionSpec& spec, const DetachedTensors* detached,
                             TensorView* view) {
  const bool cf = spec.key.layout == Layout::kChannelFirst;
  absl::Status s = CheckTensorOf(t, field, spec.key.x_dtype, 3,
                                 cf ? "[B, D, S]" : "[B, S, D]", detached, view);
  if (!s.ok()) return s;
  if (s = ExpectDim(field, 0, view->shape[0], spec.batch, "B of the session"); !s.ok()) {
    return s;
  }
  return ExpectDim(field, cf ? 1 : 2, view->shape[cf ? 1 : 2], spec.key.dim,
                   "D of the session");
}

// The session's weights: a registered set, or a copy of the inline ones.
absl::Status ResolveSessionWeights(const v1::OpenSessionRequest& r,
                                   const WeightRegistry& registry,
                                   const ValidationLimits& limits, const std::string& prefix,
                                   SessionSpec* spec) {
  std::shared_ptr<const WeightSet> set;
  if (r.weights_case() == v1::OpenSessionRequest::kWeightsName) {
    if (absl::Status s = WeightRegistry::ValidateName(r.weights_name()); !s.ok()) {
      return InvalidArgumentError(StrCat(prefix, "weights_name: ", s.message()));
    }
    absl::StatusOr<std::shared_ptr<const WeightSet>> found = registry.Lookup(r.weights_name());
    if (!found.ok()) {
      if (absl::IsNotFound(found.status())) {
        return absl::NotFoundError(StrCat(prefix, "weights_name \"", r.weights_name(),
                                          "\" is not registered"));
      }
      return found.status();
    }
    set = std::move(*found);
  } else if (r.weights_case() == v1::OpenSessionRequest::kInlineWeights) {
    const v1::InlineWeights& w = r.inline_weights();
    const std::string field = StrCat(prefix, "inline_weights.weight");
    if (!w.has_weight()) return InvalidArgumentError(StrCat(field, " is missing"));
    absl::StatusOr<DType> dtype = FromWireDType(w.weight().dtype(), StrCat(field, ".dtype"));
    if (!dtype.ok()) return dtype.status();
    TensorView weight;
    absl::Status s = CheckTensorOf(w.weight(), field, *dtype, 2, "[D, W]", nullptr, &weight);
    if (!s.ok()) return s;
    auto copy = std::make_shared<WeightSet>();
    // Immutable for the session's life: backends may keep it on the device.
    copy->id = NewUnregisteredWeightsId();
    copy->dtype = *dtype;
    copy->dim = weight.shape[0];
    copy->width = static_cast<int32_t>(weight.shape[1]);
    copy->weight_bytes = w.weight().data();
    if (w.has_bias()) {
      const std::string bias_field = StrCat(prefix, "inline_weights.bias");
      TensorView bias;
      s = CheckTensorOf(w.bias(), bias_field, *dtype, 1, "[D]", nullptr, &bias);
      if (!s.ok()) return s;
      if (s = ExpectDim(bias_field, 0, bias.shape[0], copy->dim, "D of the weight"); !s.ok()) {
        return s;
      }
      copy->has_bias = true;
      copy->bias_bytes = w.bias().data();
    }
    set = std::move(copy);
  } else {
    return InvalidArgumentError(
        StrCat(prefix, "weights: neither weights_name nor inline_weights is set"));
  }
  if (set->width < 1 || set->width > limits.max_width) {
    return InvalidArgumentError(StrCat(prefix, "weights: width W is ", set->width,
                                       ", expected 1..", limits.max_width));
  }
  spec->key.weight_dtype = set->dtype;
  spec->key.grad_weight_dtype = set->dtype;
  spec->key.dim = set->dim;
  spec->key.width = set->width;
  spec->key.has_bias = set->has_bias;
  spec->weight = set->weight();
  if (set->has_bias) spec->bias = set->bias();
  spec->weights_owner = std::move(set);
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateOpenSession(const v1::OpenSessionRequest& r,
                                 const WeightRegistry& registry,
                                 const ValidationLimits& limits, absl::string_view prefix_view,
                                 ValidatedOpen* out) {
  *out = ValidatedOpen();
  const std::string prefix(prefix_view);
  SessionSpec& spec = out->spec;
  spec.key.op = Op::kUpdate;
  absl::StatusOr<DType> dtype = FromWireDType(r.dtype(), StrCat(prefix, "dtype"));
  if (!dtype.ok()) return dtype.status();
  spec.key.x_dtype = *dtype;
  switch (r.layout()) {
    case v1::LAYOUT_CHANNEL_FIRST: spec.key.layout = Layout::kChannelFirst; break;
    case v1::LAYOUT_CHANNEL_LAST: spec.key.layout = Layout::kChannelLast; break;
    default:
      return InvalidArgumentError(StrCat(prefix, "layout is ", r.layout(),
                                         ", expected LAYOUT_CHANNEL_FIRST (0) or "
                                         "LAYOUT_CHANNEL_LAST (1)"));
  }
  switch (r.activation()) {
    case v1::ACTIVATION_NONE: spec.key.activation = Activation::kNone; break;
    case v1::ACTIVATION_SILU: spec.key.activation = Activation::kSiLU; break;
    default:
      return InvalidArgumentError(StrCat(prefix, "activation is ", r.activation(),
                                         ", expected ACTIVATION_NONE (0) or "
                                         "ACTIVATION_SILU (1)"));
  }
  if (r.batch() < 1) {
    return InvalidArgumentError(
        StrCat(prefix, "batch is ", r.batch(), ", expected >= 1 (B of the session)"));
  }
  spec.batch = r.batch();
  absl::Status s = ResolveSessionWeights(r, registry, limits, prefix, &spec);
  if (!s.ok()) return s;
  const int64_t min_k = std::max<int32_t>(spec.key.width - 1, 1);
  if (r.state_len() != 0 && r.state_len() < min_k) {
    return InvalidArgumentError(StrCat(prefix, "state_len is ", r.state_len(),
                                       ", expected 0 (meaning ", min_k, ") or >= ", min_k,
                                       " (max(W-1, 1))"));
  }
  spec.state_len = r.state_len() == 0 ? min_k : r.state_len();
  if (r.max_draft_tokens() < 0 || r.max_draft_tokens() > kMaxDraftTokens) {
    return InvalidArgumentError(StrCat(prefix, "max_draft_tokens is ", r.max_draft_tokens(),
                                       ", expected 0..", kMaxDraftTokens));
  }
  spec.max_draft_tokens = r.max_draft_tokens();
  if (spec.batch > (int64_t{1} << 40) / std::max<int64_t>(spec.key.dim, 1) ||
      spec.state_len > (int64_t{1} << 40)) {
    return InvalidArgumentError(StrCat(prefix, "batch * D * state_len is too large"));
  }
  if (r.has_conv_state()) {
    const std::string field = StrCat(prefix, "conv_state");
    s = CheckTensorOf(r.conv_state(), field, spec.key.x_dtype, 3, "[B, D, K]", nullptr,
                      &out->conv_state);
    if (!s.ok()) return s;
    if (s = ExpectDim(field, 0, out->conv_state.shape[0], spec.batch, "batch"); !s.ok()) {
      return s;
    }
    if (s = ExpectDim(field, 1, out->conv_state.shape[1], spec.key.dim, "D of the weights");
        !s.ok()) {
      return s;
    }
    if (s = ExpectDim(field, 2, out->conv_state.shape[2], spec.state_len, "state_len");
        !s.ok()) {
      return s;
    }
  }
  if (r.has_prefill()) {
    s = CheckActivation(r.prefill(), StrCat(prefix, "prefill"), spec, nullptr,
                        &out->prefill);
    if (!s.ok()) return s;
    const int64_t moved = 2 * out->prefill.bytes + spec.slot_bytes_needed();
    if (moved > limits.max_request_bytes) {
      return InvalidArgumentError(StrCat(prefix, "prefill moves ", moved,
                                         " bytes, more than the server's max_request_bytes of ",
                                         limits.max_request_bytes));
    }
  }
  if (!r.session_id().empty()) {
    return InvalidArgumentError(
        StrCat(prefix, "session_id: only a Decode stream's open may name a session"));
  }
  return absl::OkStatus();
}

absl::Status ValidateSessionX(const v1::Tensor& x, bool present, absl::string_view field,
                              const SessionSpec& spec, const ValidationLimits& limits,
                              const DetachedTensors* detached, TensorView* view) {
  const std::string name(field);
  if (!present) return InvalidArgumentError(StrCat(name, " is missing"));
  absl::Status s = CheckActivation(x, name, spec, detached, view);
  if (!s.ok()) return s;
  const int64_t moved = 2 * view->bytes + spec.slot_bytes_needed();
  if (moved > limits.max_request_bytes) {
    return InvalidArgumentError(StrCat(name, " moves ", moved,
                                       " bytes, more than the server's max_request_bytes of ",
                                       limits.max_request_bytes));
  }
  return absl::OkStatus();
}

absl::Status ValidateSessionUpdate(const v1::UpdateRequest& r) {
  if (r.has_conv_state()) {
    return InvalidArgumentError(
        "conv_state: must be unset with session_id (the session keeps the state)");
  }
  if (r.weights_case() != v1::UpdateRequest::WEIGHTS_NOT_SET) {
    return InvalidArgumentError(
        "weights: must be unset with session_id (the session's weights apply)");
  }
  if (r.layout() != v1::LAYOUT_CHANNEL_FIRST || r.activation() != v1::ACTIVATION_NONE) {
    return InvalidArgumentError(
        "layout, activation: must be unset with session_id (the session's apply)");
  }
  return absl::OkStatus();
}

}  // namespace conv1d
