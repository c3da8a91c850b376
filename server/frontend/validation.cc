#include "server/frontend/validation.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

namespace conv1d {
namespace {

using ::absl::InvalidArgumentError;
using ::absl::StrCat;

template <typename Dims>
std::string ShapeString(const Dims& dims) {
  // Bounded whatever the request sent: at most 8 dims shown, then a count.
  if (dims.size() <= 8) return StrCat("[", absl::StrJoin(dims, ","), "]");
  return StrCat("[", absl::StrJoin(dims.begin(), dims.begin() + 8, ","), ",... (",
                dims.size(), " dims)]");
}

const char* WireDTypeName(int wire) {
  switch (wire) {
    case v1::FP32: return "FP32";
    case v1::FP16: return "FP16";
    case v1::BF16: return "BF16";
    case v1::DTYPE_UNSPECIFIED: return "DTYPE_UNSPECIFIED";
  }
  return "unknown";
}

absl::StatusOr<Layout> CheckLayout(int wire) {
  switch (wire) {
    case v1::LAYOUT_CHANNEL_FIRST: return Layout::kChannelFirst;
    case v1::LAYOUT_CHANNEL_LAST: return Layout::kChannelLast;
  }
  return InvalidArgumentError(StrCat(
      "layout is ", wire,
      ", expected LAYOUT_CHANNEL_FIRST (0) or LAYOUT_CHANNEL_LAST (1)"));
}

absl::StatusOr<Activation> CheckActivation(int wire) {
  switch (wire) {
    case v1::ACTIVATION_NONE: return Activation::kNone;
    case v1::ACTIVATION_SILU: return Activation::kSiLU;
  }
  return InvalidArgumentError(StrCat(
      "activation is ", wire,
      ", expected ACTIVATION_NONE (0) or ACTIVATION_SILU (1)"));
}

// Checks dtype, rank, dims and byte count of one wire tensor and points
// *view into its data: its own, or the detached bytes `detached` (may be
// null) holds for it. `dims_hint` names the dims ("[B, D, L]") for
// messages. The last dim may be 0 when `allow_empty_last` (width-1 states).
absl::Status CheckTensor(const v1::Tensor& t, absl::string_view field,
                         int rank, absl::string_view dims_hint,
                         bool allow_empty_last, TensorView* view,
                         const DetachedTensors* detached = nullptr) {
  absl::StatusOr<DType> dtype = FromWireDType(t.dtype(), StrCat(field, ".dtype"));
  if (!dtype.ok()) return dtype.status();
  if (t.shape_size() != rank) {
    return InvalidArgumentError(StrCat(field, ".shape ", ShapeString(t.shape()),
                                       " has rank ", t.shape_size(),
                                       ", expected rank ", rank, " ", dims_hint));
  }
  int64_t elements = 1;
  for (int i = 0; i < rank; ++i) {
    const int64_t d = t.shape(i);
    const int64_t min_dim = (allow_empty_last && i == rank - 1) ? 0 : 1;
    if (d < min_dim) {
      return InvalidArgumentError(StrCat(field, ".shape[", i, "] is ", d,
                                         ", expected >= ", min_dim, " (shape ",
                                         ShapeString(t.shape()), " ",
                                         dims_hint, ")"));
    }
    if (__builtin_mul_overflow(elements, d, &elements)) {
      return InvalidArgumentError(StrCat(field, ".shape ", ShapeString(t.shape()),
                                         " has more elements than fit in int64"));
    }
  }
  int64_t bytes = 0;
  if (__builtin_mul_overflow(elements, DTypeSize(*dtype), &bytes)) {
    return InvalidArgumentError(StrCat(field, ".shape ", ShapeString(t.shape()),
                                       " has more bytes than fit in int64"));
  }
  const DetachedTensors::Entry* moved = detached != nullptr ? detached->Find(&t) : nullptr;
  const int64_t received =
      moved != nullptr ? moved->bytes : static_cast<int64_t>(t.data().size());
  if (received != bytes) {
    return InvalidArgumentError(StrCat(
        field, ".data has ", received, " bytes, expected ", bytes,
        " (shape ", ShapeString(t.shape()), " ", DTypeName(*dtype), ")"));
  }
  view->dtype = *dtype;
  view->shape.assign(t.shape().begin(), t.shape().end());
  if (moved != nullptr) {
    view->data = moved->buffer.get();
    view->owner = moved->buffer;
    view->where = moved->where;
  } else {
    view->data = t.data().data();
    view->owner = nullptr;  // the request outlives the task (see conv1d_service)
  }
  view->bytes = bytes;
  return absl::OkStatus();
}

absl::Status ExpectDim(absl::string_view field, int index, int64_t actual,
                       int64_t expected, absl::string_view what) {
  if (actual == expected) return absl::OkStatus();
  return InvalidArgumentError(StrCat(field, ".shape[", index, "] is ", actual,
                                     ", expected ", expected, " (", what, ")"));
}

absl::Status ExpectDType(absl::string_view field, DType actual, DType expected,
                         absl::string_view what) {
  if (actual == expected) return absl::OkStatus();
  return InvalidArgumentError(StrCat(field, ".dtype is ", DTypeName(actual),
                                     ", expected ", DTypeName(expected), " (",
                                     what, ")"));
}

// The activation tensor x (or dout): its view and B, D, L.
struct Activations {
  TensorView view;
  int64_t batch = 0, dim = 0, seqlen = 0;
};

absl::Status CheckActivations(const v1::Tensor& t, bool present,
                              absl::string_view field, Layout layout,
                              const DetachedTensors* detached, Activations* out) {
  if (!present) return InvalidArgumentError(StrCat(field, " is missing"));
  const bool cf = layout == Layout::kChannelFirst;
  absl::Status s = CheckTensor(t, field, 3, cf ? "[B, D, L]" : "[B, L, D]",
                               /*allow_empty_last=*/false, &out->view, detached);
  if (!s.ok()) return s;
  out->batch = out->view.shape[0];
  out->dim = out->view.shape[cf ? 1 : 2];
  out->seqlen = out->view.shape[cf ? 2 : 1];
  return absl::OkStatus();
}

// A [B, D, K] state tensor of x's dtype; K == expected_k, or K >= min_k when
// expected_k < 0.
absl::Status CheckState(const v1::Tensor& t, absl::string_view field,
                        const Activations& x, int64_t expected_k, int64_t min_k,
                        const DetachedTensors* detached, TensorView* view) {
  absl::Status s = CheckTensor(t, field, 3, "[B, D, K]",
                               /*allow_empty_last=*/expected_k == 0, view, detached);
  if (!s.ok()) return s;
  if (s = ExpectDType(field, view->dtype, x.view.dtype, "x's dtype"); !s.ok()) return s;
  if (s = ExpectDim(field, 0, view->shape[0], x.batch, "B of x"); !s.ok()) return s;
  if (s = ExpectDim(field, 1, view->shape[1], x.dim, "D of x"); !s.ok()) return s;
  if (expected_k >= 0) return ExpectDim(field, 2, view->shape[2], expected_k, "W-1");
  if (view->shape[2] < min_k) {
    return InvalidArgumentError(StrCat(field, ".shape[2] is ", view->shape[2],
                                       ", expected >= ", min_k, " (max(W-1, 1))"));
  }
  return absl::OkStatus();
}

// An optional [B, D, W-1] state input (initial_states, dfinal_states): when
// present it is checked into *view and *flag says whether the kernel uses it
// (not for W = 1, whose states are empty).
absl::Status OptionalStateIn(bool present, const v1::Tensor& t, absl::string_view field,
                             const Activations& x, int64_t k,
                             const DetachedTensors* detached, TensorView* view,
                             bool* flag) {
  if (!present) return absl::OkStatus();
  absl::Status s = CheckState(t, field, x, k, 0, detached, view);
  if (!s.ok()) return s;
  if (k == 0) *view = TensorView();
  *flag = k > 0;
  return absl::OkStatus();
}

// Resolves the request's weights (inline or registered) against x's D.
template <typename Request>
absl::Status ResolveWeights(const Request& request, const Activations& x,
                            const WeightRegistry& registry,
                            const ValidationLimits& limits,
                            const DetachedTensors* detached, ValidatedCall* call) {
  BatchKey& key = call->key;
  ConvSegment& seg = call->segment;
  if (request.weights_case() == Request::kWeightsName) {
    const std::string& name = request.weights_name();
    if (absl::Status s = WeightRegistry::ValidateName(name); !s.ok()) {
      return InvalidArgumentError(
          StrCat("weights_name: ", absl::StripPrefix(s.message(), "name: ")));
    }
    absl::StatusOr<std::shared_ptr<const WeightSet>> ws = registry.Lookup(name);
    if (!ws.ok()) {
      if (absl::IsNotFound(ws.status())) {
        return absl::NotFoundError(
            StrCat("weights_name \"", name, "\" is not registered"));
      }
      return ws.status();
    }
    const WeightSet& set = **ws;
    if (set.dim != x.dim) {
      return InvalidArgumentError(StrCat("weights_name \"", name, "\" has D=",
                                         set.dim, ", but x has D=", x.dim));
    }
    if (set.width < 1 || set.width > limits.max_width) {
      return InvalidArgumentError(StrCat("weights_name \"", name, "\" has W=",
                                         set.width, ", expected 1..",
                                         limits.max_width));
    }
    key.weight_dtype = set.dtype;
    key.width = set.width;
    key.has_bias = set.has_bias;
    seg.weight = set.weight();
    if (set.has_bias) seg.bias = set.bias();
    call->weights = std::move(*ws);
    return absl::OkStatus();
  }
  if (request.weights_case() != Request::kInlineWeights) {
    return InvalidArgumentError(
        "weights: neither weights_name nor inline_weights is set");
  }
  const v1::InlineWeights& w = request.inline_weights();
  if (!w.has_weight()) return InvalidArgumentError("inline_weights.weight is missing");
  absl::Status s = CheckTensor(w.weight(), "inline_weights.weight", 2, "[D, W]",
                               false, &seg.weight, detached);
  if (!s.ok()) return s;
  if (s = ExpectDim("inline_weights.weight", 0, seg.weight.shape[0], x.dim, "D of x");
      !s.ok()) {
    return s;
  }
  const int64_t width = seg.weight.shape[1];
  if (width > limits.max_width) {
    return InvalidArgumentError(StrCat("inline_weights.weight.shape[1] (width W) is ",
                                       width, ", expected 1..", limits.max_width));
  }
  key.weight_dtype = seg.weight.dtype;
  key.width = static_cast<int32_t>(width);
  if (w.has_bias()) {
    s = CheckTensor(w.bias(), "inline_weights.bias", 1, "[D]", false, &seg.bias,
                    detached);
    if (!s.ok()) return s;
    if (s = ExpectDType("inline_weights.bias", seg.bias.dtype, seg.weight.dtype,
                        "the weight's dtype");
        !s.ok()) {
      return s;
    }
    if (s = ExpectDim("inline_weights.bias", 0, seg.bias.shape[0], x.dim, "D of x");
        !s.ok()) {
      return s;
    }
    key.has_bias = true;
  }
  return absl::OkStatus();
}

OutputView MakeOutput(DType dtype, Shape shape) {
  OutputView out;
  out.dtype = dtype;
  out.shape = std::move(shape);
  // Cannot overflow: every output is at most kMaxWidth times an input that
  // was received in full.
  out.bytes = NumElements(out.shape) * DTypeSize(dtype);
  return out;
}

int64_t InputBytes(const TensorView& v) { return v.present() ? v.bytes : 0; }

// An optional [B, D, W-1] state output (final_states, dinitial_states),
// when requested: *flag set and *out sized, or, for W = 1, an empty tensor
// in the response.
void OptionalStateOut(bool requested, const Activations& x, int64_t k, DType dtype,
                      OutputView* out, bool* flag, ValidatedCall* call) {
  if (!requested) return;
  if (k > 0) {
    *out = MakeOutput(dtype, Shape{x.batch, x.dim, k});
    *flag = true;
  } else {
    call->empty_states_out = true;
  }
}

// Common head of the three compute ops: layout, activation, x, weights.
template <typename Request>
absl::Status ValidateCommon(const Request& request, Op op,
                            const WeightRegistry& registry,
                            const ValidationLimits& limits,
                            const DetachedTensors* detached, Activations* x,
                            ValidatedCall* call) {
  *call = ValidatedCall();
  absl::StatusOr<Layout> layout = CheckLayout(request.layout());
  if (!layout.ok()) return layout.status();
  absl::StatusOr<Activation> act = CheckActivation(request.activation());
  if (!act.ok()) return act.status();
  absl::Status s = CheckActivations(request.x(), request.has_x(), "x", *layout, detached, x);
  if (!s.ok()) return s;
  BatchKey& key = call->key;
  key.op = op;
  key.layout = *layout;
  key.activation = *act;
  key.x_dtype = x->view.dtype;
  key.dim = x->dim;
  call->segment.batch = x->batch;
  call->segment.seqlen = x->seqlen;
  call->segment.x = x->view;
  return ResolveWeights(request, *x, registry, limits, detached, call);
}

void Accumulate(ValidatedCall* call) {
  const ConvSegment& s = call->segment;
  int64_t total = 0;
  // Outputs are sized but not bound yet: their bytes count.
  for (int i = 0; i < kNumRoles; ++i) {
    const Role r = RoleAt(i);
    total += IsInput(r) ? InputBytes(s.input(r)) : s.output(r).bytes;
  }
  call->total_bytes = total;
}

}  // namespace

absl::StatusOr<DType> FromWireDType(int wire, absl::string_view field) {
  switch (wire) {
    case v1::FP32: return DType::kF32;
    case v1::FP16: return DType::kF16;
    case v1::BF16: return DType::kBF16;
  }
  return InvalidArgumentError(StrCat(field, " is ", WireDTypeName(wire), " (", wire,
                                     "), expected FP32, FP16 or BF16"));
}

v1::DType ToWireDType(DType dtype) {
  switch (dtype) {
    case DType::kF32: return v1::FP32;
    case DType::kF16: return v1::FP16;
    case DType::kBF16: return v1::BF16;
  }
  return v1::DTYPE_UNSPECIFIED;
}

absl::Status ValidateForward(const v1::ForwardRequest& request,
                             const WeightRegistry& registry,
                             const ValidationLimits& limits, ValidatedCall* call,
                             const DetachedTensors* detached) {
  Activations x;
  absl::Status s = ValidateCommon(request, Op::kForward, registry, limits, detached, &x, call);
  if (!s.ok()) return s;
  BatchKey& key = call->key;
  ConvSegment& seg = call->segment;
  const int64_t k = key.width - 1;
  s = OptionalStateIn(request.has_initial_states(), request.initial_states(),
                      "initial_states", x, k, detached, &seg.initial_states,
                      &key.has_initial_states);
  if (!s.ok()) return s;
  seg.y = MakeOutput(key.x_dtype, seg.x.shape);
  OptionalStateOut(request.return_final_states(), x, k, key.x_dtype, &seg.final_states,
                   &key.return_final_states, call);
  Accumulate(call);
  return absl::OkStatus();
}

absl::Status ValidateBackward(const v1::BackwardRequest& request,
                              const WeightRegistry& registry,
                              const ValidationLimits& limits, ValidatedCall* call,
                              const DetachedTensors* detached) {
  Activations x;
  absl::Status s = ValidateCommon(request, Op::kBackward, registry, limits, detached, &x, call);
  if (!s.ok()) return s;
  BatchKey& key = call->key;
  ConvSegment& seg = call->segment;
  Activations dout;
  s = CheckActivations(request.dout(), request.has_dout(), "dout", key.layout,
                       detached, &dout);
  if (!s.ok()) return s;
  if (s = ExpectDType("dout", dout.view.dtype, key.x_dtype, "x's dtype"); !s.ok()) {
    return s;
  }
  for (int i = 0; i < 3; ++i) {
    if (s = ExpectDim("dout", i, dout.view.shape[i], seg.x.shape[i], "shape of x");
        !s.ok()) {
      return s;
    }
  }
  seg.dout = dout.view;
  const int64_t k = key.width - 1;
  s = OptionalStateIn(request.has_initial_states(), request.initial_states(),
                      "initial_states", x, k, detached, &seg.initial_states,
                      &key.has_initial_states);
  if (!s.ok()) return s;
  s = OptionalStateIn(request.has_dfinal_states(), request.dfinal_states(), "dfinal_states",
                      x, k, detached, &seg.dfinal_states, &key.has_dfinal_states);
  if (!s.ok()) return s;
  key.grad_weight_dtype = request.grad_weight_fp32() ? DType::kF32 : key.weight_dtype;
  seg.dx = MakeOutput(key.x_dtype, seg.x.shape);
  seg.dweight = MakeOutput(key.grad_weight_dtype, Shape{x.dim, key.width});
  if (key.has_bias) seg.dbias = MakeOutput(key.grad_weight_dtype, Shape{x.dim});
  OptionalStateOut(request.return_dinitial_states(), x, k, key.x_dtype,
                   &seg.dinitial_states, &key.return_dinitial_states, call);
  Accumulate(call);
  return absl::OkStatus();
}

absl::Status ValidateUpdate(const v1::UpdateRequest& request,
                            const WeightRegistry& registry,
                            const ValidationLimits& limits, ValidatedCall* call,
                            const DetachedTensors* detached) {
  Activations x;
  absl::Status s = ValidateCommon(request, Op::kUpdate, registry, limits, detached, &x, call);
  if (!s.ok()) return s;
  BatchKey& key = call->key;
  ConvSegment& seg = call->segment;
  if (!request.has_conv_state()) return InvalidArgumentError("conv_state is missing");
  const int64_t min_k = key.width > 1 ? key.width - 1 : 1;
  s = CheckState(request.conv_state(), "conv_state", x, /*expected_k=*/-1, min_k,
                 detached, &seg.conv_state);
  if (!s.ok()) return s;
  seg.state_len = seg.conv_state.shape[2];
  seg.y = MakeOutput(key.x_dtype, seg.x.shape);
  seg.conv_state_out = MakeOutput(key.x_dtype, seg.conv_state.shape);
  Accumulate(call);
  return absl::OkStatus();
}

absl::Status CheckRequestSize(const ValidatedCall& call,
                              const ValidationLimits& limits) {
  if (call.total_bytes <= limits.max_request_bytes) return absl::OkStatus();
  return InvalidArgumentError(StrCat(
      "request moves ", call.total_bytes, " bytes (inputs plus outputs), more than "
      "the server's max_request_bytes of ", limits.max_request_bytes));
}

absl::Status ValidateRegisterWeights(const v1::RegisterWeightsRequest& request,
                                     const ValidationLimits& limits,
                                     ValidatedWeights* weights) {
  if (absl::Status s = WeightRegistry::ValidateName(request.name()); !s.ok()) {
    return s;
  }
  if (!request.has_weight()) return InvalidArgumentError("weight is missing");
  TensorView w;
  absl::Status s = CheckTensor(request.weight(), "weight", 2, "[D, W]", false, &w);
  if (!s.ok()) return s;
  if (w.shape[1] > limits.max_width) {
    return InvalidArgumentError(StrCat("weight.shape[1] (width W) is ", w.shape[1],
                                       ", expected 1..", limits.max_width));
  }
  if (request.has_bias()) {
    TensorView b;
    s = CheckTensor(request.bias(), "bias", 1, "[D]", false, &b);
    if (!s.ok()) return s;
    if (s = ExpectDType("bias", b.dtype, w.dtype, "the weight's dtype"); !s.ok()) return s;
    if (s = ExpectDim("bias", 0, b.shape[0], w.shape[0], "D of weight"); !s.ok()) return s;
  }
  weights->dtype = w.dtype;
  weights->dim = w.shape[0];
  weights->width = static_cast<int32_t>(w.shape[1]);
  weights->has_bias = request.has_bias();
  return absl::OkStatus();
}

}  // namespace conv1d
