// The backward's dweight/dbias reduction as a device function
// (reduce_dw_teams): each (segment, channel) sums the fp32 partials the
// main kernels wrote, in an order fixed by its number of partials alone, so
// results are deterministic and the same whichever kernel runs it:
// reduce_dw_kernel (reduce_dw.hip), or the channel-last backward after its
// grid barrier (bwd_cl.hip). ReduceDwLanes picks the mode both use.
//
// Used by kernels/*.hip only. Device functions; no state.
#ifndef CONV1D_KERNELS_REDUCE_DW_H_
#define CONV1D_KERNELS_REDUCE_DW_H_

#include "kernels/bwd_common.h"

namespace conv1d::kernels::dev {
namespace reduce {

constexpr int kMaxK = detail::kMaxFastWidth + 1;

// The W+1 sums of one (segment, channel) stored where the request wants
// them (unrolled over kK >= W + 1, so that acc stays in registers).
template <int kK>
__device__ __forceinline__ void store_dw(const KParams& p, const Conv1dSegment& seg, int64_t d,
                                         const float (&acc)[kK]) {
  const int W = p.width;
#pragma unroll
  for (int k = 0; k < kK; ++k) {
    if (k < W) store_any(seg.out(Role::kDweight), d * W + k, p.gwtype, acc[k]);
    else if (k == W && p.has_bias) store_any(seg.out(Role::kDbias), d, p.gwtype, acc[k]);
  }
}

// Channels of at most this many partials are summed in index order (more,
// by a team's butterfly: 16 in order by shuffles cost launches of few
// channels about a point of copy speed).
constexpr int64_t kInOrderMax = 12;
// Lane mode (below) when the launch has at least this many channels, so
// that its teams still fill the device.
constexpr int64_t kLanesMinPairs = 16384;

// The sums of a channel's nparts (<= kInOrderMax) partials by one lane, in
// index order. Loads run ahead of the adds.
template <int kK>
__device__ __forceinline__ void sum_in_order(const float* part, int64_t nparts, int W,
                                             float (&acc)[kK]) {
#pragma unroll
  for (int k = 0; k < kK; ++k) acc[k] = 0.0f;
#pragma unroll 2
  for (int64_t i = 0; i < nparts; ++i) {
#pragma unroll
    for (int k = 0; k < kK; ++k) {
      if (k <= W) acc[k] += part[i * (W + 1) + k];
    }
  }
}

// dweight/dbias of each (segment, channel) from its batch * nchunks
// partials, in an order fixed by that count alone, so results are
// deterministic and the same whatever else shares the launch:
//  - at most kInOrderMax partials: summed in index order from 0 (a single
//    partial v gives 0 + v, as the kernels that store a channel's sums
//    themselves do);
//  - more: by a team, lanes striding in index order, then a fixed
//    butterfly (the W+1 sums are independent: all the loads of a stride are
//    issued before the adds).
// kLanes (every channel of the launch has at most kInOrderMax partials and
// there are at least kLanesMinPairs channels, as in fused launches of many
// short or ragged requests): a team takes kTeam channels and a lane sums
// one alone; a team per channel spent most of its time in butterflies over
// idle lanes. Otherwise a team takes one channel; few partials are loaded
// a lane each and summed in order by shuffles (one round trip, as the
// butterfly).
//
// Team `team` of `nteams` (each kTeam lanes, all of them calling) takes
// every nteams-th unit of work; the partials must be complete and visible.
// kK >= W + 1 sums are held per lane (a caller that knows W passes W + 1:
// fewer registers, the same sums).
template <bool kLanes, int kK = kMaxK>
__device__ __forceinline__ void reduce_dw_teams(const KParams& p, int64_t team, int64_t nteams) {
  const int lane = threadIdx.x % kTeam;
  const int W = p.width;
  const int64_t total = static_cast<int64_t>(p.nseg) * p.dim;
  const int64_t per_team = kLanes ? kTeam : 1;
  const int64_t stride = nteams * per_team;
  for (int64_t t0 = team * per_team; t0 < total; t0 += stride) {
    const int64_t t = kLanes ? t0 + lane : t0;
    if (t >= total) continue;
    const int64_t s = div_fast(t, p.dim);
    const int64_t d = t - s * p.dim;
    const Conv1dSegment& seg = p.segs[s];
    if (seg.ws_partial_offset < 0) continue;  // stored by the main kernel
    const int64_t nparts = seg.batch * seg.nchunks;
    const float* part = p.partials + seg.ws_partial_offset + d * nparts * (W + 1);
    float acc[kK];
    if (kLanes) {
      sum_in_order(part, nparts, W, acc);
      store_dw(p, seg, d, acc);
      continue;
    }
    if (nparts <= kInOrderMax) {
      float v[kK];
#pragma unroll
      for (int k = 0; k < kK; ++k) {
        v[k] = lane < nparts && k <= W ? part[lane * (W + 1) + k] : 0.0f;
        acc[k] = 0.0f;
      }
      for (int i = 0; i < nparts; ++i) {
#pragma unroll
        for (int k = 0; k < kK; ++k) {
          if (k <= W) acc[k] += gpu_shfl(v[k], i, kTeam);
        }
      }
      if (lane == 0) store_dw(p, seg, d, acc);
      continue;
    }
#pragma unroll
    for (int k = 0; k < kK; ++k) acc[k] = 0.0f;
    for (int64_t i = lane; i < nparts; i += kTeam) {
      float v[kK];
#pragma unroll
      for (int k = 0; k < kK; ++k) v[k] = k <= W ? part[i * (W + 1) + k] : 0.0f;
#pragma unroll
      for (int k = 0; k < kK; ++k) acc[k] += v[k];
    }
#pragma unroll
    for (int k = 0; k < kK; ++k) acc[k] = team_sum(acc[k]);
    if (lane == 0) store_dw(p, seg, d, acc);
  }
}

}  // namespace reduce

// Whether a reduction of k's segments, none with more than max_partials
// partials per channel, runs in lane mode (reduce_dw_teams<true>).
inline bool ReduceDwLanes(const KParams& k, int64_t max_partials) {
  return max_partials <= reduce::kInOrderMax && static_cast<int64_t>(k.nseg) * k.dim >= reduce::kLanesMinPairs;
}

}  // namespace conv1d::kernels::dev

#endif  // CONV1D_KERNELS_REDUCE_DW_H_
