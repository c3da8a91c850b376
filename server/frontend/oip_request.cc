#include "server/frontend/oip_request.h"

#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "server/frontend/oip_params.h"

namespace conv1d {
namespace {

using ::absl::InvalidArgumentError;
using ::absl::StrCat;

template <typename Request>
v1::Tensor* TensorOf(Request* r, Role role) {
  switch (role) {
    case Role::kX: return r->mutable_x();
    case Role::kWeight: return r->mutable_inline_weights()->mutable_weight();
    case Role::kBias: return r->mutable_inline_weights()->mutable_bias();
    default: break;
  }
  if constexpr (std::is_same_v<Request, v1::UpdateRequest>) {
    if (role == Role::kConvState) return r->mutable_conv_state();
  } else {
    if (role == Role::kInitialStates) return r->mutable_initial_states();
  }
  if constexpr (std::is_same_v<Request, v1::BackwardRequest>) {
    if (role == Role::kDout) return r->mutable_dout();
    if (role == Role::kDfinalStates) return r->mutable_dfinal_states();
  }
  return nullptr;  // not reached: roles come from the model's table
}

// Bytes that the call does not own, as a buffer for DetachedTensors.
std::shared_ptr<void> Unowned(const void* data) {
  return std::shared_ptr<void>(std::shared_ptr<void>(), const_cast<void*>(data));
}

// Typed values other than fp32_contents.
int OtherTypedContents(const inference::InferTensorContents& c) {
  return c.bool_contents_size() + c.int_contents_size() + c.int64_contents_size() +
         c.uint_contents_size() + c.uint64_contents_size() + c.fp64_contents_size() +
         c.bytes_contents_size();
}

bool HasTypedContents(const inference::InferTensorContents& c) {
  return c.fp32_contents_size() + OtherTypedContents(c) > 0;
}

// Points the request's tensor of `role` at the bytes of input `index`.
template <typename Request>
absl::Status BindInput(const inference::ModelInferRequest& request, const RawBuffers* raw_in,
                       int index, Role role, const SharedMemoryRegistry* shm,
                       const RegionUser& user, Request* message,
                       DetachedTensors* detached,
                       std::vector<std::shared_ptr<void>>* leases) {
  const inference::ModelInferRequest::InferInputTensor& in = request.inputs(index);
  const std::string what = StrCat("input '", in.name(), "'");
  DType dtype;
  if (!ParseOipDType(in.datatype(), &dtype)) {
    return InvalidArgumentError(StrCat(what, ": datatype \"", in.datatype(),
                                       "\" is not served, expected FP32, FP16 or BF16"));
  }
  v1::Tensor* t = TensorOf(message, role);
  t->set_dtype(ToWireDType(dtype));
  t->mutable_shape()->Assign(in.shape().begin(), in.shape().end());
  ShmRef ref;
  if (absl::Status s = ParseShmRef(in.parameters(), what, &ref); !s.ok()) return s;
  const bool raw = request.raw_input_contents_size() > 0;
  const bool typed = HasTypedContents(in.contents());
  if (ref.present) {
    if (typed || (raw && (!request.raw_input_contents(index).empty() ||
                          (raw_in != nullptr && raw_in->Find(index) != nullptr)))) {
      return InvalidArgumentError(
          StrCat(what, ": data both in shared memory and in the request"));
    }
    if (shm == nullptr) {
      return absl::FailedPreconditionError(
          StrCat(what, ": this server has no shared-memory regions"));
    }
    absl::StatusOr<SharedSpan> span =
        shm->Resolve(ref.region, ref.offset, ref.byte_size, what, user);
    if (!span.ok()) return span.status();
    detached->Add(t, std::move(span->data), span->bytes, span->where);
    leases->push_back(std::move(span->lease));
    return absl::OkStatus();
  }
  if (raw) {
    if (typed) {
      return InvalidArgumentError(
          StrCat(what, ": typed contents in a request that uses raw_input_contents"));
    }
    if (const HostBuffer* b = raw_in != nullptr ? raw_in->Find(index) : nullptr) {
      detached->Add(t, *b, raw_in->bytes[index]);
      return absl::OkStatus();
    }
    const std::string& bytes = request.raw_input_contents(index);
    detached->Add(t, Unowned(bytes.data()), static_cast<int64_t>(bytes.size()));
    return absl::OkStatus();
  }
  const inference::InferTensorContents& c = in.contents();
  if (typed && (dtype != DType::kF32 || OtherTypedContents(c) > 0)) {
    return InvalidArgumentError(StrCat(
        what, ": typed contents must be fp32_contents for FP32 tensors; FP16 and BF16 "
              "travel in raw_input_contents or shared memory"));
  }
  detached->Add(t, Unowned(c.fp32_contents().data()),
                static_cast<int64_t>(c.fp32_contents_size()) * 4);
  return absl::OkStatus();
}

template <typename Request>
absl::Status TranslateInputs(const inference::ModelInferRequest& request,
                             const RawBuffers* raw_in, const OipModel& model,
                             const SharedMemoryRegistry* shm, const RegionUser& user,
                             const std::string& weights_name, bool require_all,
                             OipInputRule rule, Request* message, DetachedTensors* detached,
                             std::vector<std::shared_ptr<void>>* leases) {
  if (request.raw_input_contents_size() > 0 &&
      request.raw_input_contents_size() != request.inputs_size()) {
    return InvalidArgumentError(StrCat("raw_input_contents has ",
                                       request.raw_input_contents_size(),
                                       " entries, expected one per input (",
                                       request.inputs_size(), ")"));
  }
  RoleSet seen;
  for (int i = 0; i < request.inputs_size(); ++i) {
    const std::string& name = request.inputs(i).name();
    const Role* role = nullptr;
    for (const Role& r : model.inputs) {
      if (name == RoleName(r)) role = &r;
    }
    if (role == nullptr) {
      return InvalidArgumentError(StrCat("input '", name, "' is not an input of model ",
                                         model.name, " (inputs: ", RoleList(model.inputs),
                                         ")"));
    }
    if (rule == OipInputRule::kSequenceStep && *role != Role::kX) {
      return InvalidArgumentError(StrCat(
          "input '", name, "': a sequence's later requests carry x only (the sequence keeps "
          "the weights, bias and state of its start)"));
    }
    if (seen.has(*role)) return InvalidArgumentError(StrCat("input '", name, "' is given twice"));
    seen = seen.with(*role);
    absl::Status s =
        BindInput(request, raw_in, i, *role, shm, user, message, detached, leases);
    if (!s.ok()) return s;
  }
  const bool sequence = rule != OipInputRule::kStateless;
  for (Role r : model.inputs) {
    const bool required =
        sequence ? r == Role::kX : require_all || IsRequiredInput(model.op, r);
    if (required && !seen.has(r)) {
      return InvalidArgumentError(StrCat(
          "input '", RoleName(r), "' is missing (model ", model.name, " needs it",
          !sequence && require_all && !IsRequiredInput(model.op, r)
              ? "; this server requires every input (--oip_require_all_inputs)"
              : "",
          ")"));
    }
  }
  if (rule == OipInputRule::kSequenceStep) return absl::OkStatus();
  if (!weights_name.empty()) {
    if (seen.has(Role::kWeight) || seen.has(Role::kBias)) {
      return InvalidArgumentError(StrCat(
          "parameter '", kParamWeightsName, "' and input '",
          RoleName(seen.has(Role::kWeight) ? Role::kWeight : Role::kBias),
          "' both give weights; send one"));
    }
    message->set_weights_name(weights_name);
  } else if (!seen.has(Role::kWeight)) {
    return InvalidArgumentError(StrCat("input 'weight' is missing: send it, or name a "
                                       "registered weight set in parameter '",
                                       kParamWeightsName, "'"));
  }
  return absl::OkStatus();
}

// The outputs the request asked for (with their regions), checked against
// the model; an empty request list means the defaults.
absl::Status RequestedOutputs(const inference::ModelInferRequest& request,
                              const OipModel& model, std::vector<OipOutput>* outputs,
                              std::vector<ShmRef>* refs) {
  RoleSet seen;
  for (const auto& out : request.outputs()) {
    const Role* role = nullptr;
    for (const Role& r : model.outputs) {
      if (out.name() == RoleName(r)) role = &r;
    }
    if (role == nullptr) {
      return InvalidArgumentError(StrCat("output '", out.name(),
                                         "' is not an output of model ", model.name,
                                         " (outputs: ", RoleList(model.outputs), ")"));
    }
    if (seen.has(*role)) {
      return InvalidArgumentError(StrCat("output '", out.name(), "' is requested twice"));
    }
    seen = seen.with(*role);
    ShmRef ref;
    absl::Status s = ParseShmRef(out.parameters(), StrCat("output '", out.name(), "'"), &ref);
    if (!s.ok()) return s;
    OipOutput o;
    o.role = *role;
    o.returned = true;
    outputs->push_back(std::move(o));
    refs->push_back(std::move(ref));
  }
  return absl::OkStatus();
}

// The outputs' storage once call->valid is known: the defaults when the
// request listed none, the computed but unrequested ones, and the regions of
// those in shared memory (refs: one per requested output).
absl::Status FinishOutputs(const OipModel& model, const SharedMemoryRegistry* shm,
                           const RegionUser& user, std::vector<ShmRef> refs,
                           OipInferCall* call) {
  auto requested = [&](Role r) {
    for (const OipOutput& o : call->outputs) {
      if (o.role == r) return true;
    }
    return false;
  };
  const bool has_bias = call->valid.key.has_bias;
  if (call->outputs.empty()) {
    for (Role r : model.outputs) {
      if (!IsDefaultOutput(r, has_bias)) continue;
      OipOutput o;
      o.role = r;
      o.returned = true;
      call->outputs.push_back(o);
      refs.emplace_back();
    }
  }
  // Outputs the op writes whether asked for or not.
  for (Role r : model.outputs) {
    const OutputView* view = &call->valid.segment.output(r);
    if (view->bytes == 0 || requested(r)) continue;
    OipOutput o;
    o.role = r;
    call->outputs.push_back(o);
    refs.emplace_back();
  }
  for (size_t i = 0; i < call->outputs.size(); ++i) {
    OipOutput& o = call->outputs[i];
    const std::string what = StrCat("output '", RoleName(o.role), "'");
    const OutputView* view = &call->valid.segment.output(o.role);
    if (o.role == Role::kDbias && !has_bias) {
      return InvalidArgumentError(
          StrCat(what, " exists only for weights with a bias (input 'bias')"));
    }
    o.empty_state = view->bytes == 0;
    if (!refs[i].present) continue;
    if (shm == nullptr) {
      return absl::FailedPreconditionError(
          StrCat(what, ": this server has no shared-memory regions"));
    }
    absl::StatusOr<SharedSpan> span =
        shm->Resolve(refs[i].region, refs[i].offset, refs[i].byte_size, what, user);
    if (!span.ok()) return span.status();
    if (span->bytes < view->bytes) {
      return InvalidArgumentError(StrCat(what, ": ", kParamShmByteSize, " is ", span->bytes,
                                         ", less than the output's ", view->bytes,
                                         " bytes"));
    }
    o.shared = true;
    call->leases.push_back(std::move(span->lease));
    o.span = *std::move(span);
    o.region = refs[i].region;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status InOipTerms(const absl::Status& s) {
  if (s.ok()) return s;
  std::string message = absl::StrReplaceAll(
      s.message(), {{"inline_weights.weight", "weight"},
                    {"inline_weights.bias", "bias"},
                    {".data has", " has"}});
  return absl::Status(s.code(), message);
}

const google::protobuf::Message* TranslatedRequest(const OipInferCall* call) {
  if (call == nullptr || call->model == nullptr) return nullptr;
  switch (call->model->op) {
    case Op::kForward: return &call->forward;
    case Op::kBackward: return &call->backward;
    case Op::kUpdate: return &call->update;
  }
  return nullptr;
}

absl::Status PrepareOipInfer(const inference::ModelInferRequest& request,
                             const RawBuffers* raw, const WeightRegistry& registry,
                             const SharedMemoryRegistry* shm, const RegionUser& user,
                             const ValidationLimits& limits, bool require_all_inputs,
                             OipInferCall* call) {
  const OipModel* model = FindOipModel(request.model_name());
  if (model == nullptr) {
    return absl::NotFoundError(StrCat("model '", request.model_name(),
                                      "' is not served (models: conv1d_forward, "
                                      "conv1d_backward, conv1d_update)"));
  }
  if (!request.model_version().empty() && request.model_version() != kOipModelVersion) {
    return absl::NotFoundError(StrCat("model '", model->name, "' has no version '",
                                      request.model_version(), "' (versions: ",
                                      kOipModelVersion, ")"));
  }
  call->model = model;
  std::string weights_name;
  absl::Status s = ApplyParameters(request, model->op, &call->forward, &call->backward,
                                   &call->update, &weights_name);
  if (!s.ok()) return s;
  std::vector<ShmRef> refs;
  s = RequestedOutputs(request, *model, &call->outputs, &refs);
  if (!s.ok()) return s;
  auto requested = [&](Role r) {
    for (const OipOutput& o : call->outputs) {
      if (o.role == r) return true;
    }
    return false;
  };
  switch (model->op) {
    case Op::kForward:
      s = TranslateInputs(request, raw, *model, shm, user, weights_name, require_all_inputs,
                          OipInputRule::kStateless, &call->forward, &call->inputs,
                          &call->leases);
      if (!s.ok()) return s;
      call->forward.set_return_final_states(requested(Role::kFinalStates));
      s = ValidateForward(call->forward, registry, limits, &call->valid, &call->inputs);
      break;
    case Op::kBackward:
      s = TranslateInputs(request, raw, *model, shm, user, weights_name, require_all_inputs,
                          OipInputRule::kStateless, &call->backward, &call->inputs,
                          &call->leases);
      if (!s.ok()) return s;
      call->backward.set_return_dinitial_states(requested(Role::kDinitialStates));
      s = ValidateBackward(call->backward, registry, limits, &call->valid, &call->inputs);
      break;
    case Op::kUpdate:
      s = TranslateInputs(request, raw, *model, shm, user, weights_name, require_all_inputs,
                          OipInputRule::kStateless, &call->update, &call->inputs,
                          &call->leases);
      if (!s.ok()) return s;
      s = ValidateUpdate(call->update, registry, limits, &call->valid, &call->inputs);
      break;
  }
  if (!s.ok()) return InOipTerms(s);
  return FinishOutputs(*model, shm, user, std::move(refs), call);
}

absl::Status TranslateOipSequenceInputs(const inference::ModelInferRequest& request,
                                        const RawBuffers* raw,
                                        const SharedMemoryRegistry* shm,
                                        const RegionUser& user,
                                        const std::string& weights_name, OipInputRule rule,
                                        OipInferCall* call) {
  call->model = FindOipModel(request.model_name());
  if (call->model == nullptr || call->model->op != Op::kUpdate) {
    return InvalidArgumentError(StrCat("model '", request.model_name(),
                                       "' serves no sequences (model conv1d_update does)"));
  }
  return TranslateInputs(request, raw, *call->model, shm, user, weights_name, false, rule,
                         &call->update, &call->inputs, &call->leases);
}

absl::Status PrepareOipSequenceOutputs(const inference::ModelInferRequest& request,
                                       const SharedMemoryRegistry* shm,
                                       const RegionUser& user, OipInferCall* call) {
  std::vector<ShmRef> refs;
  absl::Status s = RequestedOutputs(request, *call->model, &call->outputs, &refs);
  if (!s.ok()) return s;
  if (call->outputs.empty()) {
    OipOutput y;
    y.role = Role::kY;
    y.returned = true;
    call->outputs.push_back(y);
    refs.emplace_back();
  }
  return FinishOutputs(*call->model, shm, user, std::move(refs), call);
}

void BindOipOutputs(const inference::ModelInferRequest& request, OipInferCall* call,
                    inference::ModelInferResponse* response,
                    const OipOutputBuffers* buffers) {
  response->set_model_name(call->model->name);
  response->set_model_version(kOipModelVersion);
  response->set_id(request.id());
  ConvSegment& seg = call->valid.segment;
  // raw_output_contents has one entry per output, as clients index it like
  // `outputs`: empty for an output in shared memory.
  for (OipOutput& o : call->outputs) {
    OutputView* view = &seg.output(o.role);
    if (o.returned) {
      auto* t = response->add_outputs();
      t->set_name(RoleName(o.role));
      if (o.empty_state) {
        const DType dtype = call->valid.key.x_dtype;
        t->set_datatype(OipDTypeName(dtype));
        for (int64_t d : {seg.batch, call->valid.key.dim, int64_t{0}}) t->add_shape(d);
      } else {
        t->set_datatype(OipDTypeName(view->dtype));
        t->mutable_shape()->Assign(view->shape.begin(), view->shape.end());
      }
      std::string* bytes = response->add_raw_output_contents();
      if (o.shared) {
        auto& params = *t->mutable_parameters();
        params[kParamShmRegion].set_string_param(o.region);
        params[kParamShmOffset].set_int64_param(o.span.where.offset);
        params[kParamShmByteSize].set_int64_param(o.span.bytes);
      } else if (!o.empty_state && buffers != nullptr && buffers->min_bytes >= 0 &&
                 view->bytes >= buffers->min_bytes) {
        const int index = response->raw_output_contents_size() - 1;
        HostBuffer buffer = buffers->allocate(view->bytes);
        view->data = buffer.data.get();
        view->where.kind = buffer.kind;
        buffers->raw->buffers.resize(index + 1);
        buffers->raw->bytes.resize(index + 1);
        buffers->raw->buffers[index] = std::move(buffer);
        buffers->raw->bytes[index] = view->bytes;
      } else if (!o.empty_state) {
        bytes->resize(static_cast<size_t>(view->bytes));
        view->data = bytes->data();
      }
    }
    if (o.empty_state) continue;
    if (o.shared) {
      view->data = o.span.data.get();
      view->where = o.span.where;
    } else if (!o.returned) {
      call->scratch.emplace_back(new char[static_cast<size_t>(view->bytes)]);
      view->data = call->scratch.back().get();
    }
  }
}

}  // namespace conv1d
