// Host side of the conv1d kernel API (conv1d_kernels.h): argument checks,
// planning of the ragged segment table (tiles, workspace layout, vector-path
// legality per segment) and the dispatch to the kernel families.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/conv1d_internal.h"
#include "kernels/conv1d_kernels.h"
#include "kernels/conv1d_layout.h"

namespace conv1d::kernels {
namespace {

using namespace detail;

bool ValidType(ScalarType t) {
  return t == ScalarType::kF32 || t == ScalarType::kF16 || t == ScalarType::kBF16;
}

bool Aligned(const void* ptr, int64_t bytes) {
  return ptr == nullptr || (reinterpret_cast<uintptr_t>(ptr) % static_cast<uintptr_t>(bytes)) == 0;
}


}  // namespace

bool Conv1dStreamsInPlace(const Conv1dProblem& p, int64_t seqlen, int64_t state_len) {
  const int64_t ne = 16 / ElemBytes(p.x_type);
  if (p.op == KernelOp::kUpdate) {
    // The update's vector path (update_rows_vec), alignment aside: x, y
    // and the weights as whole vectors, the state staged through shared
    // memory in coalesced passes.
    return FastWidth(p.width) && seqlen == 1 && state_len == p.width - 1 && p.dim % ne == 0;
  }
  // The planner's short rows: scalar (fwd_cf_rows_staged: one chunk of one
  // element per lane, a length the vector path never takes) or vector
  // (fwd_cf_rows_team: whole 16-byte vectors, at most one per lane; the
  // planner also needs x and y 16-byte aligned).
  if (p.op != KernelOp::kForward || ChoosePath(p) != kPathFastChannelFirst || seqlen < 1) {
    return false;
  }
  if (!HaloInVector(p.width, static_cast<int>(ne))) return seqlen <= kTeam;  // scalar only
  return seqlen % ne != 0 ? seqlen <= kTeam : seqlen <= kTeam * ne;
}

namespace {

bool ProblemValid(const Conv1dProblem& p) {
  if (!ValidType(p.x_type) || !ValidType(p.weight_type) || !ValidType(p.grad_weight_type)) {
    return false;
  }
  if (p.weight_type != ScalarType::kF32 && p.weight_type != p.x_type) return false;
  if (p.op == KernelOp::kBackward && p.grad_weight_type != ScalarType::kF32 &&
      p.grad_weight_type != p.weight_type) {
    return false;
  }
  if (p.dim < 1 || p.width < 1 || p.width > kMaxKernelWidth) return false;
  if (p.op != KernelOp::kForward && p.op != KernelOp::kBackward && p.op != KernelOp::kUpdate) {
    return false;
  }
  if (p.layout != KernelLayout::kChannelFirst && p.layout != KernelLayout::kChannelLast) {
    return false;
  }
  return true;
}

}  // namespace

hipError_t Conv1dCanImplement(const Conv1dProblem& p, const Conv1dSegment* segs, int32_t n) {
  if (segs == nullptr || n < 1 || !ProblemValid(p)) return hipErrorInvalidValue;
  const bool states = p.width > 1;  // W = 1 has no state slots
  for (int32_t i = 0; i < n; ++i) {
    const Conv1dSegment& s = segs[i];
    if (s.batch < 1 || s.seqlen < 1 || !s.in(Role::kX) || !s.in(Role::kWeight)) return hipErrorInvalidValue;
    if (p.has_bias && !s.in(Role::kBias)) return hipErrorInvalidValue;
    switch (p.op) {
      case KernelOp::kForward:
        if (!s.out(Role::kY)) return hipErrorInvalidValue;
        if (states && p.has_initial_states && !s.in(Role::kInitialStates)) return hipErrorInvalidValue;
        if (states && p.return_final_states && !s.out(Role::kFinalStates)) return hipErrorInvalidValue;
        break;
      case KernelOp::kBackward:
        if (!s.in(Role::kDout) || !s.out(Role::kDx) || !s.out(Role::kDweight)) return hipErrorInvalidValue;
        if (p.has_bias && !s.out(Role::kDbias)) return hipErrorInvalidValue;
        if (states && p.has_initial_states && !s.in(Role::kInitialStates)) return hipErrorInvalidValue;
        if (states && p.has_dfinal_states && !s.in(Role::kDfinalStates)) return hipErrorInvalidValue;
        if (states && p.return_dinitial_states && !s.out(Role::kDinitialStates)) return hipErrorInvalidValue;
        break;
      case KernelOp::kUpdate:
        if (!s.out(Role::kY) || !s.out(Role::kConvStateOut) || s.state_len < p.width - 1) return hipErrorInvalidValue;
        if (s.state_len > 0 && !s.in(Role::kConvState)) return hipErrorInvalidValue;
        break;
    }
  }
  return hipSuccess;
}

hipError_t Conv1dPlan(const Conv1dProblem& p, Conv1dSegment* segs, int32_t n, Conv1dPlanInfo* plan) {
  if (plan == nullptr) return hipErrorInvalidValue;
  const hipError_t ok = Conv1dCanImplement(p, segs, n);
  if (ok != hipSuccess) return ok;
  const int32_t path = ChoosePath(p);
  const bool bwd = p.op == KernelOp::kBackward;
  const int64_t esize = ElemBytes(p.x_type);
  const int64_t D = p.dim;
  const int64_t W = p.width;
  int64_t tiles = 0, floats = 0;
  // Tile ranges by kind: 0 long (scalar), 1 short-row vector, 2 long-row
  // vector, 3 16-bit long rows walked (see Conv1dPlanInfo).
  int64_t lo[4] = {-1, -1, -1, -1}, hi[4] = {0, 0, 0, 0};
  bool reduce = false;
  int64_t max_partials = 0;  // per (segment, channel), over the partial writers
  // Short-row vector tiles (fwd/bwd_cf_short_kernel) hold up to
  // k*ShortSteps steps; fewer when the launch's short rows would make fewer
  // than k*ShortTiles tiles. Tiling does not change any result (each row
  // is computed, and its dweight summed, within one step), so it may
  // depend on the whole launch.
  int64_t short_steps = 1;
  if (path == kPathFastChannelFirst) {
    const int64_t cap = bwd ? BwdShortSteps(static_cast<int>(esize)) : kFwdShortSteps;
    const int64_t target = bwd ? kBwdShortTiles : kFwdShortTiles;
    const int64_t ne = 16 / esize;
    int64_t total = 0;
    for (int32_t i = 0; i < n; ++i) {
      const int64_t L = segs[i].seqlen;
      if (!CfVecShape(p, L) || L > kTeam * ne) continue;  // not a short vector row
      total += CeilDiv(segs[i].batch * D, kTeam / ShortLanes(L / ne));
    }
    while (short_steps * 2 <= cap && total / (short_steps * 2) >= target) {
      short_steps *= 2;
    }
  }
  const int64_t walk_group = WalkGroup(p, segs, n);
  const int64_t cl_steps = path != kPathFastChannelLast ? 0
                           : bwd                        ? kClStepsBwd
                                                        : ClFwdSteps(p, segs, n, FwdClResidentBlocks(p));
  // First pass, in the caller's order: each segment's path, tiles,
  // workspace floats and kernel family (kind), the last three in per-thread
  // scratch indexed by the caller's order (source_index), which keeps its
  // capacity: planning allocates nothing in steady state.
  // Rank of each kind in the table's order: long-range families first, so
  // that the fp32 long launch from tile 0 covers only its own.
  constexpr int kRank[4] = {0, 3, 1, 2};  // kinds 0 long, 1 short, 2 stream, 3 walk
  struct Counts {
    int64_t tiles, floats;
    int kind;
  };
  thread_local std::vector<Counts> counts;
  counts.resize(static_cast<size_t>(n));
  uint32_t ranks_seen = 0;
  bool ordered = true;
  int prev_rank = 0;
  for (int32_t i = 0; i < n; ++i) {
    Conv1dSegment& s = segs[i];
    const int64_t B = s.batch, L = s.seqlen;
    s.tile_begin = tiles;
    s.source_index = i;
    const int64_t floats_before = floats;
    s.ws_partial_offset = floats;
    s.ws_grad_offset = floats;
    s.vec = 0;
    s.per_lane = 1;
    s.nchunks = 1;
    s.rows_per_tile = 1;
    s.channels_per_tile = 1;
    bool walk = false;  // 16-bit rows walked (CfLayout::walk)
    if (path == kPathFastChannelFirst) {
      const bool aligned = Aligned(s.in(Role::kX), 16) &&
                           (bwd ? Aligned(s.in(Role::kDout), 16) && Aligned(s.out(Role::kDx), 16)
                                : Aligned(s.out(Role::kY), 16));
      const bool vec = CfVecShape(p, L) && aligned;
      const bool shifted = !vec && aligned && CfShiftedShape(p, L);
      // Shifted rows span at most ne - 1 more grid elements than L.
      const int64_t ne = 16 / esize;
      const CfLayout c =
          CfSegmentLayout(p, B, shifted ? L + ne - 1 : L, vec || shifted, short_steps, shifted, walk_group);
      s.vec = shifted ? kVecShifted : vec;
      s.per_lane = c.per_lane;
      s.nchunks = c.nchunks;
      s.lanes_per_row = c.lanes_per_row;
      s.rows_per_tile = c.rows_per_tile;
      s.channels_per_tile = c.channels_per_tile;
      walk = c.walk;
      tiles += c.tiles;
      if (c.walk) {
        s.ws_partial_offset = kWsWalked;
      } else if (c.direct) {
        s.ws_partial_offset = kWsDirect;
      } else if (bwd) {
        floats += c.floats;
        reduce = true;
        max_partials = std::max(max_partials, B * c.nchunks);
      }
    } else if (path == kPathFastChannelLast) {
      const int64_t kN = bwd ? kClVecBwd : ClVecFwd(static_cast<int>(esize));
      const int64_t vb = kN * esize;
      const bool vec = D % kN == 0 && Aligned(s.in(Role::kX), vb) &&
                       (bwd ? Aligned(s.in(Role::kDout), vb) && Aligned(s.out(Role::kDx), vb) : Aligned(s.out(Role::kY), vb));
      const int64_t nD = vec ? D / kN : D;
      const int64_t ndb = CeilDiv(nD, kClCols);
      s.vec = vec;
      s.per_lane = static_cast<int32_t>(cl_steps);
      s.nchunks = ClChunks(p, L, cl_steps);
      tiles += B * s.nchunks * ndb;
      if (bwd) floats += D * B * s.nchunks * (W + 1);
      if (bwd) max_partials = std::max(max_partials, B * s.nchunks);
      reduce = reduce || bwd;
    } else if (path == kPathGeneral) {
      tiles += CeilDiv(B * D * (L + W - 1), kGenBlock);
      if (bwd) floats += B * D * L;
    } else {  // update
      // Vector path (update_rows_vec): one decode step with the minimal
      // state, whole 16-byte vectors of rows within one batch row.
      const int64_t r = 16 / esize;
      const bool a16 = Aligned(s.in(Role::kX), 16) && Aligned(s.out(Role::kY), 16) && Aligned(s.in(Role::kConvState), 16) &&
                       Aligned(s.out(Role::kConvStateOut), 16) && Aligned(s.in(Role::kWeight), 16) &&
                       (!p.has_bias || Aligned(s.in(Role::kBias), 16));
      s.vec = FastWidth(p.width) && L == 1 && s.state_len == W - 1 && D % r == 0 && a16;
      tiles += s.vec ? CeilDiv(B * D, kUpdBlock * r) : CeilDiv(B * D, kGenBlock);
    }
    const bool vec_cf = path == kPathFastChannelFirst && s.vec;
    const int kind = path == kPathUpdate ? (s.vec ? 2 : 0)
                     : !vec_cf ? 0
                     : s.rows_per_tile > 1 ? 1
                     : walk ? 3
                     : 2;
    const int rank = kRank[kind];
    ordered = ordered && rank >= prev_rank;
    prev_rank = rank;
    ranks_seen |= 1u << rank;
    counts[i] = {tiles - s.tile_begin, floats - floats_before, kind};
  }
  // Second pass: the segments ordered by family (stable), then their tiles
  // and workspace numbered in that order. Each family's tiles are then one
  // contiguous range that its kernel walks without meeting another
  // family's tiles. A table already in order (one family, the common case)
  // is not moved; otherwise it is reordered through per-thread scratch.
  if (!ordered) {
    thread_local std::vector<Conv1dSegment> scratch;
    scratch.clear();
    for (int rank = 0; rank < 4; ++rank) {
      if (!(ranks_seen & (1u << rank))) continue;
      for (int32_t i = 0; i < n; ++i) {
        if (kRank[counts[i].kind] == rank) scratch.push_back(segs[i]);
      }
    }
    std::copy(scratch.begin(), scratch.end(), segs);
  }
  int64_t uniform = n > 0 ? counts[0].tiles : 0;
  {
    int64_t t = 0, fl = 0;
    for (int32_t j = 0; j < n; ++j) {
      Conv1dSegment& s = segs[j];
      const Counts& c = counts[static_cast<size_t>(s.source_index)];
      const int kind = c.kind;
      const int64_t seg_tiles = c.tiles, seg_floats = c.floats;
      s.tile_begin = t;
      if (s.ws_partial_offset >= 0) s.ws_partial_offset = fl;
      s.ws_grad_offset = fl;
      t += seg_tiles;
      fl += seg_floats;
      if (seg_tiles != uniform) uniform = 0;
      if (seg_tiles > 0) {
        if (lo[kind] < 0) lo[kind] = s.tile_begin;
        hi[kind] = t;
      }
    }
  }
  plan->path = path;
  plan->num_segments = n;
  plan->total_tiles = tiles;
  plan->counter_bytes = 0;
  plan->workspace_bytes = floats * 4;
  plan->long_tile_begin = lo[0] < 0 ? 0 : lo[0];
  plan->long_tile_end = hi[0];
  plan->short_tile_begin = lo[1] < 0 ? 0 : lo[1];
  plan->short_tile_end = hi[1];
  plan->stream_tile_begin = lo[2] < 0 ? 0 : lo[2];
  plan->stream_tile_end = hi[2];
  plan->walk_tile_begin = lo[3] < 0 ? 0 : lo[3];
  plan->walk_tile_end = hi[3];
  plan->uniform_tiles =
      uniform > 0 && tiles < (int64_t{1} << 31) ? static_cast<int32_t>(uniform) : 0;
  plan->reduce_dw = reduce ? 1 : 0;
  plan->max_partials = max_partials;
  return hipSuccess;
}

int64_t Conv1dWorkspaceBytes(const Conv1dProblem& p, const Conv1dSegmentSize* sizes, int32_t n) {
  if (sizes == nullptr || n < 1 || !ProblemValid(p)) return -1;
  for (int32_t i = 0; i < n; ++i) {
    if (sizes[i].batch < 1 || sizes[i].seqlen < 1) return -1;
  }
  if (p.op != KernelOp::kBackward) return 0;
  const int32_t path = ChoosePath(p);
  const int64_t D = p.dim, W = p.width;
  int64_t floats = 0;
  for (int32_t i = 0; i < n; ++i) {
    const int64_t B = sizes[i].batch, L = sizes[i].seqlen;
    if (path == kPathFastChannelFirst) {
      // Either path, whichever the pointers' alignment allows (the
      // partials do not depend on the short-row step count).
      int64_t f = CfSegmentLayout(p, B, L, /*vec=*/false, 1).floats;
      if (CfVecShape(p, L)) {
        const int64_t fv = CfSegmentLayout(p, B, L, /*vec=*/true, 1).floats;
        f = fv > f ? fv : f;
      } else if (CfShiftedShape(p, L)) {
        const int64_t ne = 16 / ElemBytes(p.x_type);
        const int64_t fv = CfSegmentLayout(p, B, L + ne - 1, /*vec=*/true, 1, true).floats;
        f = fv > f ? fv : f;
      }
      floats += f;
    } else if (path == kPathFastChannelLast) {
      floats += D * B * ClChunks(p, L) * (W + 1);
    } else {
      floats += B * D * L;
    }
  }
  return floats * 4;
}

hipError_t Conv1dRun(const Conv1dProblem& p, const Conv1dPlanInfo& plan,
                     const Conv1dSegment* device_segments, void* workspace,
                     int64_t workspace_bytes, hipStream_t stream) {
  if (device_segments == nullptr || plan.num_segments < 1 || plan.path != ChoosePath(p)) {
    return hipErrorInvalidValue;
  }
  if (plan.workspace_bytes > 0 && (workspace == nullptr || workspace_bytes < plan.workspace_bytes ||
                                   !Aligned(workspace, 256))) {
    return hipErrorInvalidValue;
  }
  if (plan.total_tiles == 0) return hipSuccess;
  const bool bwd = p.op == KernelOp::kBackward;
  int32_t err = hipSuccess;
  switch (plan.path) {
    case kPathFastChannelFirst:
      err = bwd ? LaunchBwdChannelFirst(p, plan, device_segments, workspace, stream)
                : LaunchFwdChannelFirst(p, plan, device_segments, workspace, stream);
      break;
    case kPathFastChannelLast:
      err = bwd ? LaunchBwdChannelLast(p, plan, device_segments, workspace, stream)
                : LaunchFwdChannelLast(p, plan, device_segments, workspace, stream);
      break;
    case kPathGeneral:
      err = LaunchGeneral(p, plan, device_segments, workspace, stream);
      break;
    case kPathUpdate:
      err = LaunchUpdate(p, plan, device_segments, workspace, stream);
      break;
    default:
      return hipErrorInvalidValue;
  }
  return static_cast<hipError_t>(err);
}

}  // namespace conv1d::kernels
