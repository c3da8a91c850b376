#include "client/call_args.h"

namespace conv1d {

namespace {

template <typename Req>
void SetWeights(const WeightsArg& w, Req* req) {
  if (!w.name.empty()) {
    req->set_weights_name(w.name);
    return;
  }
  w.weight.ToProto(req->mutable_inline_weights()->mutable_weight());
  if (!w.bias.empty()) w.bias.ToProto(req->mutable_inline_weights()->mutable_bias());
}

template <typename Req>
void SetSwitches(bool silu, bool channel_last, Req* req) {
  req->set_activation(silu ? v1::ACTIVATION_SILU : v1::ACTIVATION_NONE);
  req->set_layout(channel_last ? v1::LAYOUT_CHANNEL_LAST : v1::LAYOUT_CHANNEL_FIRST);
}

}  // namespace

v1::ForwardRequest MakeForwardRequest(const ForwardArgs& a) {
  v1::ForwardRequest req;
  a.x.ToProto(req.mutable_x());
  SetWeights(a.weights, &req);
  if (!a.initial_states.empty()) a.initial_states.ToProto(req.mutable_initial_states());
  SetSwitches(a.silu, a.channel_last, &req);
  req.set_return_final_states(a.return_final_states);
  return req;
}

v1::BackwardRequest MakeBackwardRequest(const BackwardArgs& a) {
  v1::BackwardRequest req;
  a.x.ToProto(req.mutable_x());
  a.dout.ToProto(req.mutable_dout());
  SetWeights(a.weights, &req);
  if (!a.initial_states.empty()) a.initial_states.ToProto(req.mutable_initial_states());
  if (!a.dfinal_states.empty()) a.dfinal_states.ToProto(req.mutable_dfinal_states());
  SetSwitches(a.silu, a.channel_last, &req);
  req.set_return_dinitial_states(a.return_dinitial_states);
  req.set_grad_weight_fp32(a.grad_weight_fp32);
  return req;
}

v1::UpdateRequest MakeUpdateRequest(const UpdateArgs& a) {
  v1::UpdateRequest req;
  a.x.ToProto(req.mutable_x());
  a.conv_state.ToProto(req.mutable_conv_state());
  SetWeights(a.weights, &req);
  SetSwitches(a.silu, a.channel_last, &req);
  return req;
}

v1::RegisterWeightsRequest MakeRegisterWeightsRequest(const std::string& name,
                                                      const client::TensorView& weight,
                                                      const client::TensorView& bias, bool replace) {
  v1::RegisterWeightsRequest req;
  req.set_name(name);
  weight.ToProto(req.mutable_weight());
  if (!bias.empty()) bias.ToProto(req.mutable_bias());
  req.set_replace(replace);
  return req;
}

}  // namespace conv1d
