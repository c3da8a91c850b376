// Reference outputs from the project's CPU implementation (see verify.h).
#include <memory>

#include "absl/strings/str_cat.h"
#include "client/verify.h"
#include "server/backends/cpu/cpu_conv.h"
#include "server/core/conv_problem.h"

namespace conv1d {

namespace {

TensorView ViewOf(const HostTensor& t) {
  TensorView v;
  if (t.data.empty() && t.shape.empty()) return v;
  v.dtype = t.dtype;
  v.shape.assign(t.shape.begin(), t.shape.end());
  v.data = t.data.data();
  v.bytes = t.num_bytes();
  return v;
}

// Allocates `t` and returns a view that writes into it. The fill value is a
// poison, so anything the implementation leaves unwritten shows up as wrong.
OutputView Allocate(HostTensor* t, DType dtype, std::vector<int64_t> shape) {
  t->dtype = dtype;
  t->shape = std::move(shape);
  t->data.assign(t->num_elements() * DTypeSize(dtype), '\x7f');
  OutputView v;
  v.dtype = dtype;
  v.shape.assign(t->shape.begin(), t->shape.end());
  v.data = t->data.data();
  v.bytes = t->num_bytes();
  return v;
}

}  // namespace

bool ReferenceAvailable() { return true; }

absl::StatusOr<ReferenceOutputs> ComputeReference(const ReferenceProblem& p) {
  BatchKey key;
  key.op = p.op == WorkloadOp::kForward    ? Op::kForward
           : p.op == WorkloadOp::kBackward ? Op::kBackward
                                           : Op::kUpdate;
  key.x_dtype = p.x.dtype;
  key.weight_dtype = p.weight.dtype;
  key.grad_weight_dtype = p.grad_weight_fp32 ? DType::kF32 : p.weight.dtype;
  key.dim = p.dim;
  key.width = static_cast<int32_t>(p.width);
  key.activation = p.silu ? Activation::kSiLU : Activation::kNone;
  key.layout = p.channel_last ? Layout::kChannelLast : Layout::kChannelFirst;
  key.has_bias = !p.bias.data.empty();
  key.has_initial_states = !p.initial_states.data.empty();
  key.return_final_states = p.return_final_states;
  key.has_dfinal_states = !p.dfinal_states.data.empty();
  key.return_dinitial_states = p.return_dinitial_states;

  ConvSegment seg;
  seg.batch = p.batch;
  seg.seqlen = p.seqlen;
  seg.state_len = p.state_len;
  seg.x = ViewOf(p.x);
  seg.dout = ViewOf(p.dout);
  seg.weight = ViewOf(p.weight);
  seg.bias = ViewOf(p.bias);
  seg.initial_states = ViewOf(p.initial_states);
  seg.dfinal_states = ViewOf(p.dfinal_states);
  seg.conv_state = ViewOf(p.conv_state);

  ReferenceOutputs out;
  const std::vector<int64_t> states = {p.batch, p.dim, p.width - 1};
  switch (p.op) {
    case WorkloadOp::kForward:
      seg.y = Allocate(&out.y, p.x.dtype, p.x.shape);
      if (p.return_final_states) seg.final_states = Allocate(&out.final_states, p.x.dtype, states);
      break;
    case WorkloadOp::kBackward:
      seg.dx = Allocate(&out.dx, p.x.dtype, p.x.shape);
      seg.dweight = Allocate(&out.dweight, key.grad_weight_dtype, {p.dim, p.width});
      if (key.has_bias) seg.dbias = Allocate(&out.dbias, key.grad_weight_dtype, {p.dim});
      if (p.return_dinitial_states) {
        seg.dinitial_states = Allocate(&out.dinitial_states, p.x.dtype, states);
      }
      break;
    case WorkloadOp::kUpdate:
      seg.y = Allocate(&out.y, p.x.dtype, p.x.shape);
      seg.conv_state_out =
          Allocate(&out.conv_state_out, p.x.dtype, {p.batch, p.dim, p.state_len});
      break;
  }
  absl::Status s = CpuConvSegment(key, seg, /*pool=*/nullptr);
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrCat("CPU reference: ", s.message()));
  }
  return out;
}

}  // namespace conv1d
