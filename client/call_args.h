// Typed arguments of the compute calls: the tensors of a Forward, Backward
// or Update as TensorViews plus the call's switches, and the builders that
// turn them into wire requests. Conv1dClient takes them directly
// (conv1d_client.h), so an application passes its arrays without writing
// protobuf:
//
//   const float* x = ...; const float* w = ...;
//   conv1d::ForwardArgs a;
//   a.x = conv1d::client::TensorView(x, {1, 2048, 128});
//   a.weights.weight = conv1d::client::TensorView(w, {2048, 4});
//   a.silu = true;
//   absl::StatusOr<conv1d::v1::ForwardResponse> r = client->Forward(a);
//   auto y = conv1d::client::TensorView::FromProto(r->y());  // no copy
//
// An empty client::TensorView leaves an optional tensor out. The builders copy each
// view's bytes into the message once and check nothing: the server
// validates every request and names the field that is wrong.
//
// Plain values and pure functions: thread-safe. The views must stay valid
// until the request is built: for the typed calls, sync and async, until the
// call returns (the async forms build the request before they return).
#ifndef CONV1D_CLIENT_CALL_ARGS_H_
#define CONV1D_CLIENT_CALL_ARGS_H_

#include <string>

#include "client/tensor_view.h"
#include "conv1d/v1/conv1d.pb.h"

namespace conv1d {

// Where a call's weights come from: a set registered under `name`, or the
// inline `weight` [D, W] and optional `bias` [D] (used when name is empty).
struct WeightsArg {
  std::string name;
  client::TensorView weight;
  client::TensorView bias;
};

struct ForwardArgs {
  client::TensorView x;               // [B, D, L] or, channel_last, [B, L, D]
  WeightsArg weights;
  client::TensorView initial_states;  // optional [B, D, W-1]
  bool silu = false;          // as on the wire: no activation unless asked
  bool channel_last = false;
  bool return_final_states = false;
};

struct BackwardArgs {
  client::TensorView x;
  client::TensorView dout;            // x's shape and dtype
  WeightsArg weights;
  client::TensorView initial_states;  // optional [B, D, W-1]
  client::TensorView dfinal_states;   // optional [B, D, W-1]
  bool silu = false;
  bool channel_last = false;
  bool return_dinitial_states = false;
  bool grad_weight_fp32 = false;
};

struct UpdateArgs {
  client::TensorView x;           // [B, D, S] or [B, S, D]
  client::TensorView conv_state;  // [B, D, K], K >= W-1, oldest column first
  WeightsArg weights;
  bool silu = false;
  bool channel_last = false;
};

v1::ForwardRequest MakeForwardRequest(const ForwardArgs& args);
v1::BackwardRequest MakeBackwardRequest(const BackwardArgs& args);
v1::UpdateRequest MakeUpdateRequest(const UpdateArgs& args);
// `bias` may be empty.
v1::RegisterWeightsRequest MakeRegisterWeightsRequest(const std::string& name,
                                                      const client::TensorView& weight,
                                                      const client::TensorView& bias = {},
                                                      bool replace = false);

}  // namespace conv1d

#endif  // CONV1D_CLIENT_CALL_ARGS_H_
