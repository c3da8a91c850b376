#include "client/workload.h"

#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace conv1d {

namespace {

absl::Status ParseBool(absl::string_view key, absl::string_view v, bool* out) {
  const std::string s = absl::AsciiStrToLower(v);
  if (s == "1" || s == "true" || s == "yes" || s == "on") {
    *out = true;
  } else if (s == "0" || s == "false" || s == "no" || s == "off") {
    *out = false;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(key, ": '", v, "' is not a boolean"));
  }
  return absl::OkStatus();
}

int64_t Payload(const v1::Tensor& t) { return static_cast<int64_t>(t.data().size()); }

}  // namespace

const char* WorkloadOpName(WorkloadOp op) {
  switch (op) {
    case WorkloadOp::kForward: return "fwd";
    case WorkloadOp::kBackward: return "bwd";
    case WorkloadOp::kUpdate: return "update";
  }
  return "?";
}

std::string WorkloadSpec::Describe() const {
  std::string s = absl::StrCat(WorkloadOpName(op), " ", DTypeName(dtype), "/",
                               DTypeName(weight_dtype), " ", batch, "x", dim, "x", seqlen,
                               " W=", width, silu ? " silu" : " none", bias ? " bias" : "",
                               channel_last ? " cl" : " cf");
  if (initial_states) absl::StrAppend(&s, " init");
  if (return_final_states) absl::StrAppend(&s, " final");
  if (dfinal_states) absl::StrAppend(&s, " dfinal");
  if (return_dinitial_states) absl::StrAppend(&s, " dinit");
  if (op == WorkloadOp::kUpdate) absl::StrAppend(&s, " state=", effective_state_len());
  absl::StrAppend(&s, registered_weights ? " registered" : " inline");
  return s;
}

std::vector<std::string> PresetNames() {
  return {"decode-fwd", "decode-update", "small-fwd", "large-fwd", "large-bwd"};
}

absl::StatusOr<WorkloadSpec> PresetWorkload(absl::string_view name) {
  WorkloadSpec s;  // width 4, SiLU, bias, channel-first
  if (name == "decode-fwd") {
    s.batch = 1, s.dim = 5120, s.seqlen = 1;
    s.initial_states = true;
    s.return_final_states = true;
    s.registered_weights = true;
  } else if (name == "decode-update") {
    s.op = WorkloadOp::kUpdate;
    s.batch = 64, s.dim = 5120, s.seqlen = 1;
    s.registered_weights = true;
  } else if (name == "small-fwd") {
    s.batch = 1, s.dim = 2048, s.seqlen = 128;
  } else if (name == "large-fwd" || name == "large-bwd") {
    s.batch = 4, s.dim = 2048, s.seqlen = 2048;
    s.dtype = s.weight_dtype = DType::kBF16;
    if (name == "large-bwd") s.op = WorkloadOp::kBackward;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown preset '", name, "' (known: decode-fwd, decode-update, small-fwd, ",
        "large-fwd, large-bwd)"));
  }
  return s;
}

absl::Status ParseShape(absl::string_view text, int64_t* b, int64_t* d, int64_t* l) {
  std::vector<std::string> parts = absl::StrSplit(absl::AsciiStrToLower(text), 'x');
  int64_t v[3];
  if (parts.size() != 3) {
    return absl::InvalidArgumentError(absl::StrCat("shape '", text, "' is not BxDxL"));
  }
  for (int i = 0; i < 3; ++i) {
    if (!absl::SimpleAtoi(parts[i], &v[i]) || v[i] < 1) {
      return absl::InvalidArgumentError(absl::StrCat("shape '", text, "': bad dimension"));
    }
  }
  *b = v[0], *d = v[1], *l = v[2];
  return absl::OkStatus();
}

absl::Status ApplyWorkloadKey(absl::string_view key, absl::string_view value,
                              WorkloadSpec* spec) {
  if (key == "preset") {
    absl::StatusOr<WorkloadSpec> p = PresetWorkload(value);
    if (!p.ok()) return p.status();
    const double w = spec->mix_weight;
    *spec = *p;
    spec->mix_weight = w;
    return absl::OkStatus();
  }
  if (key == "op") {
    if (value == "fwd" || value == "forward") {
      spec->op = WorkloadOp::kForward;
    } else if (value == "bwd" || value == "backward") {
      spec->op = WorkloadOp::kBackward;
    } else if (value == "update") {
      spec->op = WorkloadOp::kUpdate;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("op: '", value, "' (want fwd|bwd|update)"));
    }
    return absl::OkStatus();
  }
  if (key == "shape") return ParseShape(value, &spec->batch, &spec->dim, &spec->seqlen);
  if (key == "dtype" || key == "weight_dtype") {
    absl::StatusOr<DType> t = ParseDType(value);
    if (!t.ok()) return t.status();
    (key == "dtype" ? spec->dtype : spec->weight_dtype) = *t;
    return absl::OkStatus();
  }
  if (key == "width" || key == "state_len") {
    int64_t v;
    if (!absl::SimpleAtoi(value, &v) || v < (key == "width" ? 1 : 0) || v > 1 << 20) {
      return absl::InvalidArgumentError(absl::StrCat(key, ": bad value '", value, "'"));
    }
    if (key == "width") {
      spec->width = static_cast<int32_t>(v);
    } else {
      spec->state_len = v;
    }
    return absl::OkStatus();
  }
  if (key == "activation") {
    if (value != "silu" && value != "none") {
      return absl::InvalidArgumentError(absl::StrCat("activation: '", value, "' (silu|none)"));
    }
    spec->silu = value == "silu";
    return absl::OkStatus();
  }
  if (key == "layout") {
    if (value != "cf" && value != "cl" && value != "channel_first" && value != "channel_last") {
      return absl::InvalidArgumentError(absl::StrCat("layout: '", value, "' (cf|cl)"));
    }
    spec->channel_last = value == "cl" || value == "channel_last";
    return absl::OkStatus();
  }
  if (key == "weights") {
    if (value != "inline" && value != "registered") {
      return absl::InvalidArgumentError(absl::StrCat("weights: '", value, "' (inline|registered)"));
    }
    spec->registered_weights = value == "registered";
    return absl::OkStatus();
  }
  if (key == "weights_name") {
    spec->weights_name = std::string(value);
    spec->registered_weights = !value.empty();
    return absl::OkStatus();
  }
  if (key == "weight") {
    if (!absl::SimpleAtod(value, &spec->mix_weight) || !(spec->mix_weight > 0)) {
      return absl::InvalidArgumentError(absl::StrCat("weight: bad share '", value, "'"));
    }
    return absl::OkStatus();
  }
  if (key == "bias") return ParseBool(key, value, &spec->bias);
  if (key == "initial_states") return ParseBool(key, value, &spec->initial_states);
  if (key == "final_states") return ParseBool(key, value, &spec->return_final_states);
  if (key == "dfinal_states") return ParseBool(key, value, &spec->dfinal_states);
  if (key == "dinitial_states") return ParseBool(key, value, &spec->return_dinitial_states);
  if (key == "grad_fp32") return ParseBool(key, value, &spec->grad_weight_fp32);
  return absl::InvalidArgumentError(absl::StrCat("unknown workload key '", key, "'"));
}

absl::StatusOr<std::vector<WorkloadSpec>> ParseMix(absl::string_view text,
                                                   const WorkloadSpec& defaults) {
  std::vector<WorkloadSpec> out;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = line.substr(0, line.find('#'));
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    WorkloadSpec spec = defaults;
    spec.mix_weight = 1.0;
    bool dtype_set = false, weight_dtype_set = false;
    for (absl::string_view tok : absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty())) {
      const size_t eq = tok.find('=');
      dtype_set |= tok.substr(0, eq) == "dtype";
      weight_dtype_set |= tok.substr(0, eq) == "weight_dtype";
      if (eq == absl::string_view::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat("mix line ", line_no, ": '", tok, "' is not key=value"));
      }
      absl::Status s = ApplyWorkloadKey(tok.substr(0, eq), tok.substr(eq + 1), &spec);
      if (!s.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("mix line ", line_no, ": ", s.message()));
      }
    }
    // As on the command line, a dtype moves the weights along unless given.
    if (dtype_set && !weight_dtype_set) spec.weight_dtype = spec.dtype;
    out.push_back(spec);
  }
  if (out.empty()) return absl::InvalidArgumentError("mix has no workload lines");
  return out;
}

absl::StatusOr<int64_t> CheckWorkloadBytes(const WorkloadSpec& spec,
                                           int64_t max_message_bytes) {
  // long double holds every product here exactly enough to compare with
  // int64 limits; nothing is multiplied in int64 before the check.
  using F = long double;
  const F b = spec.batch, d = spec.dim, l = spec.seqlen, w = spec.width;
  const F act = DTypeSize(spec.dtype), wt = DTypeSize(spec.weight_dtype);
  const F x = b * d * l * act;
  const F states = b * d * (w - 1) * act;
  const F weights = spec.registered_weights ? 0 : d * w * wt + (spec.bias ? d * wt : 0);
  F request = 0, response = 0;
  switch (spec.op) {
    case WorkloadOp::kForward:
      request = x + weights + (spec.initial_states ? states : 0);
      response = x + (spec.return_final_states ? states : 0);
      break;
    case WorkloadOp::kBackward:
      request = 2 * x + weights + (spec.initial_states ? states : 0) +
                (spec.dfinal_states ? states : 0);
      response = x + d * w * (spec.grad_weight_fp32 ? 4 : wt) +
                 (spec.bias ? d * (spec.grad_weight_fp32 ? 4 : wt) : 0) +
                 (spec.return_dinitial_states ? states : 0);
      break;
    case WorkloadOp::kUpdate: {
      const F state = b * d * static_cast<F>(spec.effective_state_len()) * act;
      request = x + state + weights;
      response = x + state;
      break;
    }
  }
  const std::string what =
      absl::StrCat(WorkloadOpName(spec.op), " ", spec.batch, "x", spec.dim, "x", spec.seqlen,
                   " ", DTypeName(spec.dtype), " W=", spec.width);
  const F limit = static_cast<F>(max_message_bytes);
  if (request > limit || response > limit) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "shape: a %s request carries %.4Lg bytes and its answer %.4Lg, over the "
        "message limit of %d bytes", what, request, response, max_message_bytes));
  }
  return static_cast<int64_t>(request + response);
}

absl::StatusOr<std::vector<double>> ParseLevels(absl::string_view text) {
  std::vector<double> out;
  if (text.find(':') != absl::string_view::npos) {
    std::vector<absl::string_view> p = absl::StrSplit(text, ':');
    double start, end, factor;
    if (p.size() != 3 || !absl::SimpleAtod(p[0], &start) || !absl::SimpleAtod(p[1], &end) ||
        !absl::SimpleAtod(p[2], &factor) || !(start > 0) || !(end >= start) || !(factor > 1)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "range '", text, "' is not start:end:factor with 0 < start <= end, factor > 1"));
    }
    // Tolerance so that 0.1:1:10-style ranges reach their end despite rounding.
    for (double v = start; v <= end * (1 + 1e-9); v *= factor) out.push_back(v);
    return out;
  }
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    double v;
    if (!absl::SimpleAtod(absl::StripAsciiWhitespace(part), &v) || !(v > 0)) {
      return absl::InvalidArgumentError(absl::StrCat("level '", part, "' is not a positive number"));
    }
    out.push_back(v);
  }
  if (out.empty()) return absl::InvalidArgumentError("no levels given");
  return out;
}

WeightSet MakeWeights(const WorkloadSpec& spec, uint64_t seed) {
  WeightSet w;
  // Scaled like a fan-in initialisation so outputs stay O(1) at any width.
  const float scale = 1.0f / std::sqrt(static_cast<float>(spec.width));
  w.weight = HostTensor::Random(spec.weight_dtype, {spec.dim, spec.width}, seed, -scale, scale);
  if (spec.bias) w.bias = HostTensor::Random(spec.weight_dtype, {spec.dim}, seed ^ 0xb1a5, -0.5f, 0.5f);
  return w;
}

namespace {
std::vector<int64_t> ActShape(const WorkloadSpec& s) {
  return s.channel_last ? std::vector<int64_t>{s.batch, s.seqlen, s.dim}
                        : std::vector<int64_t>{s.batch, s.dim, s.seqlen};
}

template <typename Req>
void SetCommon(const WorkloadSpec& spec, const WeightSet& w, Req* r) {
  r->set_layout(spec.channel_last ? v1::LAYOUT_CHANNEL_LAST : v1::LAYOUT_CHANNEL_FIRST);
  r->set_activation(spec.silu ? v1::ACTIVATION_SILU : v1::ACTIVATION_NONE);
  if (spec.registered_weights) {
    r->set_weights_name(spec.weights_name);
  } else {
    w.weight.ToProto(r->mutable_inline_weights()->mutable_weight());
    if (!w.bias.empty()) w.bias.ToProto(r->mutable_inline_weights()->mutable_bias());
  }
}

int64_t WeightsPayload(const WorkloadSpec& spec, const WeightSet& w) {
  return spec.registered_weights ? 0 : w.weight.num_bytes() + w.bias.num_bytes();
}
}  // namespace

PreparedRequest BuildRequest(const WorkloadSpec& spec, const WeightSet& weights,
                             uint64_t seed) {
  PreparedRequest p;
  p.op = spec.op;
  const std::vector<int64_t> states = {spec.batch, spec.dim, spec.width - 1};
  HostTensor x = HostTensor::Random(spec.dtype, ActShape(spec), seed);
  p.request_tensor_bytes = x.num_bytes() + WeightsPayload(spec, weights);
  switch (spec.op) {
    case WorkloadOp::kForward: {
      auto r = std::make_shared<v1::ForwardRequest>();
      x.ToProto(r->mutable_x());
      SetCommon(spec, weights, r.get());
      if (spec.initial_states) {
        HostTensor s = HostTensor::Random(spec.dtype, states, seed + 1);
        s.ToProto(r->mutable_initial_states());
        p.request_tensor_bytes += s.num_bytes();
      }
      r->set_return_final_states(spec.return_final_states);
      p.forward = std::move(r);
      break;
    }
    case WorkloadOp::kBackward: {
      auto r = std::make_shared<v1::BackwardRequest>();
      x.ToProto(r->mutable_x());
      HostTensor dout = HostTensor::Random(spec.dtype, ActShape(spec), seed + 2);
      dout.ToProto(r->mutable_dout());
      p.request_tensor_bytes += dout.num_bytes();
      SetCommon(spec, weights, r.get());
      if (spec.initial_states) {
        HostTensor s = HostTensor::Random(spec.dtype, states, seed + 1);
        s.ToProto(r->mutable_initial_states());
        p.request_tensor_bytes += s.num_bytes();
      }
      if (spec.dfinal_states) {
        HostTensor s = HostTensor::Random(spec.dtype, states, seed + 3);
        s.ToProto(r->mutable_dfinal_states());
        p.request_tensor_bytes += s.num_bytes();
      }
      r->set_return_dinitial_states(spec.return_dinitial_states);
      r->set_grad_weight_fp32(spec.grad_weight_fp32);
      p.backward = std::move(r);
      break;
    }
    case WorkloadOp::kUpdate: {
      auto r = std::make_shared<v1::UpdateRequest>();
      x.ToProto(r->mutable_x());
      HostTensor s = HostTensor::Random(
          spec.dtype, {spec.batch, spec.dim, spec.effective_state_len()}, seed + 1);
      s.ToProto(r->mutable_conv_state());
      p.request_tensor_bytes += s.num_bytes();
      SetCommon(spec, weights, r.get());
      p.update = std::move(r);
      break;
    }
  }
  return p;
}

int64_t TensorPayloadBytes(const v1::ForwardResponse& r) {
  return Payload(r.y()) + Payload(r.final_states());
}
int64_t TensorPayloadBytes(const v1::BackwardResponse& r) {
  return Payload(r.dx()) + Payload(r.dweight()) + Payload(r.dbias()) +
         Payload(r.dinitial_states());
}
int64_t TensorPayloadBytes(const v1::UpdateResponse& r) {
  return Payload(r.y()) + Payload(r.conv_state());
}

}  // namespace conv1d
