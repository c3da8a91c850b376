// The operation the service computes, described without any wire or device
// types: what a request asks for (ConvSegment) and which requests may share a
// fused backend call (BatchKey).
//
// Math (see DESIGN §1): x̃ is x preceded by initial_states (zeros if absent),
//   y[b,d,t] = act(bias[d] + Σ_k weight[d,k] · x̃[b,d,t-(W-1)+k]).
// Layouts: activations are [B,D,L] (kChannelFirst) or [B,L,D] (kChannelLast);
// weight is [D,W]; bias [D]; every state tensor is [B,D,K] in both layouts
// (K = W-1, or K >= W-1 for the decode conv_state).
//
// Plain values; no synchronisation needed.
#ifndef CONV1D_SERVER_CORE_CONV_PROBLEM_H_
#define CONV1D_SERVER_CORE_CONV_PROBLEM_H_

#include <cstdint>
#include <string>

#include "absl/hash/hash.h"
#include "kernels/conv1d_roles.h"
#include "server/core/dtype.h"
#include "server/core/tensor.h"

namespace conv1d {

enum class Op : uint8_t { kForward = 0, kBackward = 1, kUpdate = 2 };
enum class Layout : uint8_t { kChannelFirst = 0, kChannelLast = 1 };
enum class Activation : uint8_t { kNone = 0, kSiLU = 1 };

inline constexpr int kMaxWidth = 256;

const char* OpName(Op op);  // "forward", "backward", "update"

// Everything that must be equal for requests to be fused into one backend
// call. B, L (and the update's state length) may differ between fused
// requests, and so may their weights.
struct BatchKey {
  Op op = Op::kForward;
  DType x_dtype = DType::kF32;       // x, y, dout, dx, states
  DType weight_dtype = DType::kF32;  // weight, bias
  DType grad_weight_dtype = DType::kF32;  // dweight, dbias (backward only)
  int64_t dim = 0;                   // D
  int32_t width = 0;                 // W
  Activation activation = Activation::kNone;
  Layout layout = Layout::kChannelFirst;
  bool has_bias = false;
  bool has_initial_states = false;      // forward, backward
  bool return_final_states = false;     // forward
  bool has_dfinal_states = false;       // backward
  bool return_dinitial_states = false;  // backward
  // Device affinity: -1 for requests any lane may compute; d >= 0 for
  // requests with tensors in device memory of device d (a decode session's
  // state slot, a registered device region), which only lanes of device d
  // may compute (Backend::LaneDevice). Set from the segment's placements by
  // DeviceAffinity (segment_check.h) where the task is built.
  int32_t device = -1;

  friend bool operator==(const BatchKey& a, const BatchKey& b);
  friend bool operator!=(const BatchKey& a, const BatchKey& b) { return !(a == b); }
  template <typename H>
  friend H AbslHashValue(H h, const BatchKey& k) {
    return H::combine(std::move(h), k.op, k.x_dtype, k.weight_dtype,
                      k.grad_weight_dtype, k.dim, k.width, k.activation,
                      k.layout, k.has_bias, k.has_initial_states,
                      k.return_final_states, k.has_dfinal_states,
                      k.return_dinitial_states, k.device);
  }
  // Human-readable, e.g. "forward/fp32.fp32/D=2048/W=4/silu/cf/bias".
  std::string DebugString() const;
  // Coarse label for metrics: "<op>/<x_dtype>".
  std::string Family() const;

  // The tensors a request of this key carries (the role table's rule).
  RoleSet roles() const {
    return RolesOf(static_cast<RoleOp>(op),
                   RoleOptions{has_bias, has_initial_states, return_final_states,
                               has_dfinal_states, return_dinitial_states});
  }
  // The dtype a tensor of `role` has under this key.
  DType dtype_of(Role role) const {
    switch (DTypeClassOf(role)) {
      case RoleDType::kWeight: return weight_dtype;
      case RoleDType::kGradWeight: return grad_weight_dtype;
      case RoleDType::kActivation: break;
    }
    return x_dtype;
  }
};

// One request's tensors. Inputs are views; outputs point at storage the
// submitter provides, already sized. Which optional members are present
// is fixed by the BatchKey. Shapes (B = batch, L = seqlen, D and W from
// the key):
//   forward : x, weight, [bias], [initial_states]       -> y, [final_states]
//   backward: x, dout, weight, [bias], [initial_states], [dfinal_states]
//             -> dx, dweight, [dbias], [dinitial_states]
//   update  : x (L = S new tokens), conv_state [B,D,state_len], weight, [bias]
//             -> y, conv_state_out [B,D,state_len]
//
// Members are named for readability at call sites; code that treats every
// tensor alike goes through input(role) / output(role), which index the
// members by the role table (kernels/conv1d_roles.h).
struct ConvSegment {
  int64_t batch = 0;      // B
  int64_t seqlen = 0;     // L (S for update)
  int64_t state_len = 0;  // update only: K >= W-1
  // In role order (Role::kX .. Role::kConvState, then kY .. kConvStateOut).
  TensorView x, weight, bias, initial_states, dout, dfinal_states, conv_state;
  OutputView y, final_states, dx, dweight, dbias, dinitial_states,
      conv_state_out;

  // REQUIRES: IsInput(role) / IsOutput(role) respectively.
  const TensorView& input(Role role) const { return this->*kInputs[RoleIndex(role)]; }
  TensorView& input(Role role) { return this->*kInputs[RoleIndex(role)]; }
  const OutputView& output(Role role) const {
    return this->*kOutputs[RoleIndex(role) - kNumInputRoles];
  }
  OutputView& output(Role role) { return this->*kOutputs[RoleIndex(role) - kNumInputRoles]; }
  // The bytes, placement and presence of any role's view.
  const void* data(Role role) const {
    return IsInput(role) ? input(role).data : output(role).data;
  }
  int64_t bytes(Role role) const {
    return IsInput(role) ? input(role).bytes : output(role).bytes;
  }
  const Placement& where(Role role) const {
    return IsInput(role) ? input(role).where : output(role).where;
  }
  bool present(Role role) const { return data(role) != nullptr; }

  // Bytes read plus bytes written for this segment; used for batch budgets
  // and throughput figures.
  int64_t bytes_moved() const;

 private:
  static constexpr TensorView ConvSegment::*kInputs[kNumInputRoles] = {
      &ConvSegment::x,    &ConvSegment::weight,        &ConvSegment::bias,
      &ConvSegment::initial_states, &ConvSegment::dout, &ConvSegment::dfinal_states,
      &ConvSegment::conv_state};
  static constexpr OutputView ConvSegment::*kOutputs[kNumRoles - kNumInputRoles] = {
      &ConvSegment::y,      &ConvSegment::final_states,    &ConvSegment::dx,
      &ConvSegment::dweight, &ConvSegment::dbias, &ConvSegment::dinitial_states,
      &ConvSegment::conv_state_out};
};

}  // namespace conv1d

#endif  // CONV1D_SERVER_CORE_CONV_PROBLEM_H_
