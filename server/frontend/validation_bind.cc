// Bind*Response (validation.h): sizing a valid call's response tensors and
// pointing its segment's outputs at them, in the message's data strings or
// in host buffers sent as detached slices. Split from validation.cc; pure
// functions over their arguments, like it.
#include <string>
#include <utility>

#include "server/frontend/validation.h"

namespace conv1d {
namespace {

void SetWireTensor(const OutputView& out, v1::Tensor* t, OutputView* bound,
                   const OutputBuffers* buffers = nullptr) {
  t->set_dtype(ToWireDType(out.dtype));
  t->mutable_shape()->Assign(out.shape.begin(), out.shape.end());
  if (bound != nullptr && buffers != nullptr && buffers->min_bytes >= 0 &&
      out.bytes > 0 && out.bytes >= buffers->min_bytes) {
    HostBuffer buffer = buffers->allocate(out.bytes);
    bound->data = buffer.data.get();
    bound->where.kind = buffer.kind;
    buffers->detached->Add(t, std::move(buffer), out.bytes);
    return;
  }
  std::string* data = t->mutable_data();
  data->resize(static_cast<size_t>(out.bytes));
  if (bound != nullptr) bound->data = data->data();
}

// A [B, D, 0] answer for width-1 states.
void SetEmptyState(const ConvSegment& seg, DType dtype, int64_t dim, v1::Tensor* t) {
  OutputView empty;
  empty.dtype = dtype;
  empty.shape = Shape{seg.batch, dim, 0};
  SetWireTensor(empty, t, nullptr);
}

}  // namespace

// A state output (final_states, dinitial_states): bound when the kernel
// returns it, an empty tensor when it was requested for W = 1, and absent
// from the response otherwise (`field` adds it, so it is called only then).
template <typename MutableField>
void BindStateOut(ValidatedCall* call, bool returned, OutputView* out, MutableField field,
                  const OutputBuffers* buffers) {
  if (returned) {
    SetWireTensor(*out, field(), out, buffers);
  } else if (call->empty_states_out) {
    SetEmptyState(call->segment, call->key.x_dtype, call->key.dim, field());
  }
}

void BindForwardResponse(ValidatedCall* call, v1::ForwardResponse* response,
                         const OutputBuffers* buffers) {
  ConvSegment& seg = call->segment;
  SetWireTensor(seg.y, response->mutable_y(), &seg.y, buffers);
  BindStateOut(call, call->key.return_final_states, &seg.final_states,
               [response] { return response->mutable_final_states(); }, buffers);
}

void BindBackwardResponse(ValidatedCall* call, v1::BackwardResponse* response,
                          const OutputBuffers* buffers) {
  ConvSegment& seg = call->segment;
  SetWireTensor(seg.dx, response->mutable_dx(), &seg.dx, buffers);
  SetWireTensor(seg.dweight, response->mutable_dweight(), &seg.dweight, buffers);
  if (call->key.has_bias) {
    SetWireTensor(seg.dbias, response->mutable_dbias(), &seg.dbias, buffers);
  }
  BindStateOut(call, call->key.return_dinitial_states, &seg.dinitial_states,
               [response] { return response->mutable_dinitial_states(); }, buffers);
}

void BindUpdateResponse(ValidatedCall* call, v1::UpdateResponse* response,
                        const OutputBuffers* buffers) {
  ConvSegment& seg = call->segment;
  SetWireTensor(seg.y, response->mutable_y(), &seg.y, buffers);
  SetWireTensor(seg.conv_state_out, response->mutable_conv_state(),
                &seg.conv_state_out, buffers);
}

}  // namespace conv1d
