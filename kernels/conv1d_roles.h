// The tensor roles of a conv1d request: one table of which tensors exist,
// which are inputs or outputs, what shape and dtype class each has, and which
// ones an op (with its optional tensors) uses.
//
// A leaf header shared by the kernels (their segment table is indexed by
// role) and by the server core (views, validation, staging plans). It
// includes nothing but <cstdint>, so host and device code of every layer may
// include it. Pure constexpr values; no synchronisation.
//
// Shapes by role (B = batch, L = sequence length or new tokens S, D, W from
// the batch key, K = the decode state length):
//   x, dout, y, dx                          activations [B,D,L] or [B,L,D]
//   initial_states, dfinal_states,
//   final_states, dinitial_states           [B,D,W-1]
//   conv_state, conv_state_out              [B,D,K]
//   weight, dweight                         [D,W]
//   bias, dbias                             [D]
#ifndef CONV1D_KERNELS_CONV1D_ROLES_H_
#define CONV1D_KERNELS_CONV1D_ROLES_H_

#include <cstdint>

namespace conv1d {

// Inputs first, then outputs; the numbering indexes every per-role array.
enum class Role : uint8_t {
  kX = 0,
  kWeight,
  kBias,
  kInitialStates,
  kDout,
  kDfinalStates,
  kConvState,
  kY,
  kFinalStates,
  kDx,
  kDweight,
  kDbias,
  kDinitialStates,
  kConvStateOut,
};

inline constexpr int kNumRoles = 14;
inline constexpr int kNumInputRoles = 7;

constexpr int RoleIndex(Role r) { return static_cast<int>(r); }
constexpr Role RoleAt(int i) { return static_cast<Role>(i); }
constexpr bool IsInput(Role r) { return RoleIndex(r) < kNumInputRoles; }
constexpr bool IsOutput(Role r) { return !IsInput(r); }

// The name a role has on the wire (conv1d.v1 field names).
constexpr const char* RoleName(Role r) {
  switch (r) {
    case Role::kX: return "x";
    case Role::kWeight: return "weight";
    case Role::kBias: return "bias";
    case Role::kInitialStates: return "initial_states";
    case Role::kDout: return "dout";
    case Role::kDfinalStates: return "dfinal_states";
    case Role::kConvState: return "conv_state";
    case Role::kY: return "y";
    case Role::kFinalStates: return "final_states";
    case Role::kDx: return "dx";
    case Role::kDweight: return "dweight";
    case Role::kDbias: return "dbias";
    case Role::kDinitialStates: return "dinitial_states";
    case Role::kConvStateOut: return "conv_state_out";
  }
  return "?";
}

// The shape class of a role (see the table at the top).
enum class RoleShape : uint8_t { kActivation, kState, kConvState, kWeight, kBias };

constexpr RoleShape ShapeOf(Role r) {
  switch (r) {
    case Role::kX:
    case Role::kDout:
    case Role::kY:
    case Role::kDx:
      return RoleShape::kActivation;
    case Role::kInitialStates:
    case Role::kDfinalStates:
    case Role::kFinalStates:
    case Role::kDinitialStates:
      return RoleShape::kState;
    case Role::kConvState:
    case Role::kConvStateOut:
      return RoleShape::kConvState;
    case Role::kWeight:
    case Role::kDweight:
      return RoleShape::kWeight;
    case Role::kBias:
    case Role::kDbias:
      return RoleShape::kBias;
  }
  return RoleShape::kActivation;
}

// Which of the key's dtypes a role is stored in.
enum class RoleDType : uint8_t { kActivation, kWeight, kGradWeight };

constexpr RoleDType DTypeClassOf(Role r) {
  switch (r) {
    case Role::kWeight:
    case Role::kBias:
      return RoleDType::kWeight;
    case Role::kDweight:
    case Role::kDbias:
      return RoleDType::kGradWeight;
    default:
      return RoleDType::kActivation;
  }
}

// True for the roles whose size scales with the rows (B) of a request; the
// others (weights, their gradients) are per request.
constexpr bool IsPerRow(Role r) {
  const RoleShape s = ShapeOf(r);
  return s != RoleShape::kWeight && s != RoleShape::kBias;
}

// A set of roles, as a bit mask indexed by RoleIndex.
struct RoleSet {
  uint16_t bits = 0;
  constexpr bool has(Role r) const { return (bits >> RoleIndex(r)) & 1u; }
  constexpr RoleSet with(Role r, bool on = true) const {
    return on ? RoleSet{static_cast<uint16_t>(bits | (1u << RoleIndex(r)))} : *this;
  }
  constexpr int size() const {
    int n = 0;
    for (int i = 0; i < kNumRoles; ++i) n += (bits >> i) & 1u;
    return n;
  }
  friend constexpr bool operator==(RoleSet a, RoleSet b) { return a.bits == b.bits; }
  friend constexpr bool operator!=(RoleSet a, RoleSet b) { return a.bits != b.bits; }
};

// The numbering of the ops, shared with the server's Op and the kernels'
// KernelOp.
enum class RoleOp : uint8_t { kForward = 0, kBackward = 1, kUpdate = 2 };

// What an op's request carries beyond its required tensors.
struct RoleOptions {
  bool has_bias = false;
  bool has_initial_states = false;      // forward, backward
  bool return_final_states = false;     // forward
  bool has_dfinal_states = false;       // backward
  bool return_dinitial_states = false;  // backward
};

// The one rule of which op uses which tensor:
//   forward : x, weight, [bias], [initial_states]       -> y, [final_states]
//   backward: x, dout, weight, [bias], [initial_states], [dfinal_states]
//             -> dx, dweight, [dbias], [dinitial_states]
//   update  : x, conv_state, weight, [bias]             -> y, conv_state_out
constexpr RoleSet RolesOf(RoleOp op, const RoleOptions& o) {
  RoleSet s = RoleSet{}.with(Role::kX).with(Role::kWeight).with(Role::kBias, o.has_bias);
  switch (op) {
    case RoleOp::kForward:
      return s.with(Role::kInitialStates, o.has_initial_states)
          .with(Role::kY)
          .with(Role::kFinalStates, o.return_final_states);
    case RoleOp::kBackward:
      return s.with(Role::kDout)
          .with(Role::kInitialStates, o.has_initial_states)
          .with(Role::kDfinalStates, o.has_dfinal_states)
          .with(Role::kDx)
          .with(Role::kDweight)
          .with(Role::kDbias, o.has_bias)
          .with(Role::kDinitialStates, o.return_dinitial_states);
    case RoleOp::kUpdate:
      return s.with(Role::kConvState).with(Role::kY).with(Role::kConvStateOut);
  }
  return s;
}

}  // namespace conv1d

#endif  // CONV1D_KERNELS_CONV1D_ROLES_H_
