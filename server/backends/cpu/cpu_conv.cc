#include "server/backends/cpu/cpu_conv.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "server/backends/cpu/cpu_conv_internal.h"
#include "server/core/segment_check.h"

namespace conv1d {

absl::Status CpuConvSegment(const BatchKey& key, const ConvSegment& s, ThreadPool* pool) {
  if (absl::Status st = ValidateSegment(key, s); !st.ok()) return st;
  return CpuConvValidSegment(key, s, pool);
}

absl::Status CpuConvValidSegment(const BatchKey& key, const ConvSegment& s, ThreadPool* pool) {
  if (s.batch == 0) {
    // Nothing per sequence; weight gradients of an empty batch are zero.
    if (key.op == Op::kBackward) {
      for (int64_t i = 0; i < key.dim * key.width; ++i) StoreFromFloat(s.dweight.data, key.grad_weight_dtype, i, 0.f);
      if (s.dbias.present()) {
        for (int64_t i = 0; i < key.dim; ++i) StoreFromFloat(s.dbias.data, key.grad_weight_dtype, i, 0.f);
      }
    }
    return absl::OkStatus();
  }
  const int64_t dim = key.dim, width = key.width;
  const bool channel_last = key.layout == Layout::kChannelLast;
  // Update reads weights per channel row; forward/backward channel-last read
  // them per tap across channels.
  const bool taps_major = channel_last && key.op != Op::kUpdate;
  std::vector<float> w(dim * width), bias(dim, 0.0f);
  for (int64_t d = 0; d < dim; ++d) {
    for (int64_t k = 0; k < width; ++k) {
      const float v = LoadAsFloat(s.weight.data, key.weight_dtype, d * width + k);
      w[taps_major ? k * dim + d : d * width + k] = v;
    }
    if (key.has_bias && s.bias.present()) bias[d] = LoadAsFloat(s.bias.data, key.weight_dtype, d);
  }

  cpu_internal::ConvParams p;
  p.batch = s.batch;
  p.seqlen = s.seqlen;
  p.dim = dim;
  p.width = width;
  p.halo = width - 1;
  p.state_len = s.state_len;
  p.x_dtype = key.x_dtype;
  p.grad_weight_dtype = key.grad_weight_dtype;
  p.silu = key.activation == Activation::kSiLU;
  p.w = w.data();
  p.bias = bias.data();
  const bool has_states = p.halo > 0;
  p.x = s.x.data;
  p.dout = s.dout.data;
  p.initial_states = has_states && key.has_initial_states ? s.initial_states.data : nullptr;
  p.dfinal_states = has_states && key.has_dfinal_states ? s.dfinal_states.data : nullptr;
  p.conv_state = s.conv_state.data;
  p.y = s.y.data;
  p.final_states = has_states ? s.final_states.data : nullptr;
  p.dx = s.dx.data;
  p.dinitial_states = has_states ? s.dinitial_states.data : nullptr;
  p.conv_state_out = s.conv_state_out.data;
  p.dweight = s.dweight.data;
  p.dbias = s.dbias.data;

  switch (key.op) {
    case Op::kForward:
      channel_last ? cpu_internal::ForwardChannelLast(p, pool)
                   : cpu_internal::ForwardChannelFirst(p, pool);
      break;
    case Op::kBackward:
      channel_last ? cpu_internal::BackwardChannelLast(p, pool)
                   : cpu_internal::BackwardChannelFirst(p, pool);
      break;
    case Op::kUpdate:
      cpu_internal::Update(p, channel_last, pool);
      break;
  }
  return absl::OkStatus();
}

namespace {

TensorView InputView(const std::vector<uint8_t>& buf, DType t) {
  TensorView v;
  v.dtype = t;
  v.shape = {static_cast<int64_t>(buf.size()) / DTypeSize(t)};
  v.data = buf.empty() ? nullptr : buf.data();
  v.bytes = static_cast<int64_t>(buf.size());
  return v;
}

OutputView OutputViewOf(std::vector<uint8_t>& buf, DType t) {
  OutputView v;
  v.dtype = t;
  v.shape = {static_cast<int64_t>(buf.size()) / DTypeSize(t)};
  v.data = buf.empty() ? nullptr : buf.data();
  v.bytes = static_cast<int64_t>(buf.size());
  return v;
}

}  // namespace

void ConvBuffers::AllocateOutputs() {
  const int64_t xs = DTypeSize(key.x_dtype), gs = DTypeSize(key.grad_weight_dtype);
  const int64_t bd = batch * key.dim;
  const int64_t states_bytes = bd * (key.width - 1) * xs;
  auto size = [](std::vector<uint8_t>& v, int64_t bytes) {
    v.assign(static_cast<size_t>(std::max<int64_t>(0, bytes)), 0);
  };
  for (auto* v : {&y, &final_states, &dx, &dweight, &dbias, &dinitial_states, &conv_state_out}) v->clear();
  switch (key.op) {
    case Op::kForward:
      size(y, bd * seqlen * xs);
      if (key.return_final_states) size(final_states, states_bytes);
      break;
    case Op::kBackward:
      size(dx, bd * seqlen * xs);
      size(dweight, key.dim * key.width * gs);
      if (key.has_bias) size(dbias, key.dim * gs);
      if (key.return_dinitial_states) size(dinitial_states, states_bytes);
      break;
    case Op::kUpdate:
      size(y, bd * seqlen * xs);
      size(conv_state_out, bd * state_len * xs);
      break;
  }
}

ConvSegment ConvBuffers::Segment() {
  ConvSegment s;
  s.batch = batch;
  s.seqlen = seqlen;
  s.state_len = state_len;
  const DType xt = key.x_dtype, wt = key.weight_dtype, gt = key.grad_weight_dtype;
  s.x = InputView(x, xt);
  s.dout = InputView(dout, xt);
  s.weight = InputView(weight, wt);
  s.bias = InputView(bias, wt);
  s.initial_states = InputView(initial_states, xt);
  s.dfinal_states = InputView(dfinal_states, xt);
  s.conv_state = InputView(conv_state, xt);
  s.y = OutputViewOf(y, xt);
  s.final_states = OutputViewOf(final_states, xt);
  s.dx = OutputViewOf(dx, xt);
  s.dweight = OutputViewOf(dweight, gt);
  s.dbias = OutputViewOf(dbias, gt);
  s.dinitial_states = OutputViewOf(dinitial_states, xt);
  s.conv_state_out = OutputViewOf(conv_state_out, xt);
  return s;
}

absl::Status RunCpuConv(ConvBuffers* buffers, ThreadPool* pool) {
  buffers->AllocateOutputs();
  return CpuConvSegment(buffers->key, buffers->Segment(), pool);
}

}  // namespace conv1d
