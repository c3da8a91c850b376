// Plain-data description of one fused conv1d launch: the shared problem
// (what every segment of the launch has in common) and the per-segment table
// (one entry per request: its pointers, B, L, K).
//
// Used by the kernel launchers (kernels/) and by the GPU backend, which packs
// the segment table into its pinned staging buffer next to the inputs and
// copies both to the device in one transfer. No GPU, gRPC or server headers:
// host code may include this anywhere. Plain values; no synchronisation.
//
// Math (DESIGN §1): x̃ is x preceded by initial_states (zeros if absent),
//   y[b,d,t] = act(bias[d] + Σ_{k<W} weight[d,k] · x̃[b,d,t-(W-1)+k]).
// Activations are [B,D,L] (channel-first) or [B,L,D] (channel-last); weight
// [D,W]; bias [D]; every state tensor is [B,D,K] in both layouts.
#ifndef CONV1D_KERNELS_CONV1D_PARAMS_H_
#define CONV1D_KERNELS_CONV1D_PARAMS_H_

#include <cstdint>

#include "kernels/conv1d_roles.h"

namespace conv1d::kernels {

// Numbering matches conv1d::DType (server/core/dtype.h).
enum class ScalarType : int32_t { kF32 = 0, kF16 = 1, kBF16 = 2 };
enum class KernelOp : int32_t { kForward = 0, kBackward = 1, kUpdate = 2 };
enum class KernelLayout : int32_t { kChannelFirst = 0, kChannelLast = 1 };
enum class KernelActivation : int32_t { kNone = 0, kSiLU = 1 };

inline constexpr int32_t kMaxKernelWidth = 256;

// What all segments of one launch share (the server's batch key).
struct Conv1dProblem {
  KernelOp op = KernelOp::kForward;
  ScalarType x_type = ScalarType::kF32;  // x, y, dout, dx and every state tensor
  // weight and bias: kF32 or x_type.
  ScalarType weight_type = ScalarType::kF32;
  // dweight and dbias (backward): kF32 or weight_type. Accumulation is fp32
  // either way.
  ScalarType grad_weight_type = ScalarType::kF32;
  int64_t dim = 0;    // D, any positive value (no 65535 limit)
  int32_t width = 0;  // W in [1, kMaxKernelWidth]; 2..8 take the fast paths
  KernelActivation activation = KernelActivation::kNone;
  KernelLayout layout = KernelLayout::kChannelFirst;
  bool has_bias = false;
  bool has_initial_states = false;      // forward, backward
  bool return_final_states = false;     // forward
  bool has_dfinal_states = false;       // backward
  bool return_dinitial_states = false;  // backward
};

// One request of a fused launch. All pointers are device addresses; members
// an op does not use (see below) are ignored and may be null. Tensors are
// dense and row-major in the shapes given, B = batch, L = seqlen:
//   forward : x, weight, [bias], [initial_states] -> y, [final_states]
//   backward: x, dout, weight, [bias], [initial_states], [dfinal_states]
//             -> dx, dweight, [dbias], [dinitial_states]
//   update  : x [B,D,S] (or [B,S,D] channel-last; S = seqlen new tokens),
//             conv_state [B,D,K], weight, [bias] -> y (shaped as x),
//             conv_state_out [B,D,K]. K = state_len >= W-1. Not circular: the
//             new state is the last K columns of concat(conv_state, x), and
//             conv_state_out may equal conv_state (updated in place).
// dweight [D,W] and dbias [D] are this request's own gradients (reduced over
// its B and L only, never across segments).
struct Conv1dSegment {
  // Device address of each tensor, indexed by RoleIndex(role) (roles from
  // kernels/conv1d_roles.h). Input roles are stored as void* for one uniform
  // table but are read-only: the kernels only read them, through in().
  void* tensor[kNumRoles] = {};

  constexpr const void* in(Role r) const { return tensor[RoleIndex(r)]; }
  constexpr void* out(Role r) const { return tensor[RoleIndex(r)]; }
  // Host side: stores p for role r (inputs included; see above).
  constexpr void set(Role r, const void* p) { tensor[RoleIndex(r)] = const_cast<void*>(p); }

  int64_t batch = 0;      // B >= 1
  int64_t seqlen = 0;     // L >= 1 (S for update)
  int64_t state_len = 0;  // update only: K >= W-1

  // Scheduling fields, written by Conv1dPlan() on the host copy of the
  // table; copy the planned table to the device unchanged.
  int64_t tile_begin = 0;         // first work tile of this segment
  int64_t ws_partial_offset = 0;  // float index of its dweight partials;
                                  // negative: the main kernel stores
                                  // dweight itself (kWsDirect), or
                                  // kWsWalked for 16-bit rows walked
                                  // (backward by channel, forward by
                                  // row; own kernels)
  int32_t source_index = 0;       // the segment's index in the table as
                                  // the caller gave it (Conv1dPlan
                                  // orders the table by kernel family)
  int32_t channels_per_tile = 1;  // walked rows (kWsWalked): channels
                                  // (backward) or rows (forward) one
                                  // tile walks, one after the other
  int64_t ws_grad_offset = 0;     // float index of its g buffer (general path)
  int64_t nchunks = 0;            // chunks per row (layout-specific)
  int32_t vec = 0;                // 1: 16-byte vector path is legal;
                                  // kVecShifted: long rows of any
                                  // length on the vector grid
  int32_t per_lane = 0;           // vectors per lane (channel-first fast
                                  // path); channel-last: steps a thread
                                  // walks
  int32_t rows_per_tile = 1;      // short rows: one tile covers several rows
  int32_t lanes_per_row = 32;     // short rows: lanes of a team per row
};
// 192 bytes. The kernels' tile checks read an entry's planner fields and
// the team then starts from its pointers (see seg_lines_together); an entry
// of 200 bytes (one more int32 field and padding) cost the fused launches
// of 64 requests whose kernels it did not otherwise change 0.3-1.7 points
// of a copy (H200, 2026-11-29), so new fields take the place of others.
static_assert(sizeof(Conv1dSegment) == 8 * kNumRoles + 80, "the segment table's entry size");

// Conv1dSegment::ws_partial_offset of backward segments with no partials:
// the short-row and stream kernels store a channel's dweight/dbias
// themselves when a tile holds all of it (kWsDirect: short rows of B == 1,
// long rows of B == 1 in one chunk), the walk kernel for the channels it
// walks (kWsWalked, which also marks the forward's walked rows; see
// Conv1dPlanInfo).
inline constexpr int64_t kWsWalked = -1;
inline constexpr int64_t kWsDirect = -2;

// Conv1dSegment::vec of channel-first rows of more than 32 elements that
// the vector path cannot take as they are (L not a whole number of
// vectors, so rows start between 16-byte boundaries; or a short forward
// row whose halo exceeds a vector), run by the long-row kernels: the
// forward's, and the fp32 backward's when the halo fits a vector. They
// work on the aligned 16-byte grid that begins up to one vector before
// each row (x and y, or x, dout and dx, must share that offset: every one
// of them 16-byte aligned).
// Whole grid vectors are read, so the last row's last vector may read up
// to 15 bytes past the end of x (and dout), inside the 16-byte block that
// holds its last element (never another page); the vectors that straddle
// a row's ends are written element by element, so nothing outside the
// rows of y (dx) is written.
inline constexpr int32_t kVecShifted = 2;

// The sizes of one segment, all the workspace query needs.
struct Conv1dSegmentSize {
  int64_t batch = 0;      // B >= 1
  int64_t seqlen = 0;     // L >= 1 (S for update)
  int64_t state_len = 0;  // update only
};

// Result of Conv1dPlan(); pass it unchanged to Conv1dRun().
struct Conv1dPlanInfo {
  int32_t path = 0;  // internal: which kernel family runs
  int32_t num_segments = 0;
  int64_t total_tiles = 0;
  int64_t counter_bytes = 0;    // reserved (0)
  int64_t workspace_bytes = 0;  // total workspace the run needs (may be 0)
  // Channel-first fast path: every tile of a short-row vector segment
  // (rows_per_tile > 1, own backward kernel) lies in [short_tile_begin,
  // short_tile_end); every tile of a long-row vector segment (own
  // kernels) in [stream_tile_begin, stream_tile_end), except the 16-bit
  // ones walked (ws_partial_offset == kWsWalked, own kernels: the
  // backward's by channel, the forward's by row) in [walk_tile_begin,
  // walk_tile_end); every
  // other tile in [long_tile_begin, long_tile_end). Update: tiles of
  // vector-path segments (vec) in the stream range, the others in the long
  // range. An empty range (begin == end) launches nothing. Other paths: all
  // tiles are long.
  int64_t short_tile_begin = 0;
  int64_t short_tile_end = 0;
  int64_t long_tile_begin = 0;
  int64_t long_tile_end = 0;
  int64_t stream_tile_begin = 0;
  int64_t stream_tile_end = 0;
  int64_t walk_tile_begin = 0;
  int64_t walk_tile_end = 0;
  // When every segment owns the same number of tiles (a fused batch of
  // one shape) and the table fewer than 2^31: that number, and the kernels
  // find a tile's segment by a division instead of searching the table.
  // 0 otherwise.
  int32_t uniform_tiles = 0;
  int32_t reduce_dw = 0;  // backward: 1 if any segment writes dweight partials
  // Backward: the most partials of one (segment, channel), batch * nchunks
  // over the segments that write partials (reduce_dw_kernel's mode).
  int64_t max_partials = 0;
};

}  // namespace conv1d::kernels

#endif  // CONV1D_KERNELS_CONV1D_PARAMS_H_
