// The backward's dweight/dbias reduction (reduce_dw_kernel): each
// (segment, channel) sums the fp32 partials the main kernels wrote, in a
// fixed order, so results are deterministic.
#include "kernels/bwd_common.h"

namespace conv1d::kernels::dev {
namespace {

using detail::kTeamsPerBlock;

// dweight/dbias of each (segment, channel): a team sums the channel's
// batch * nchunks partials, lanes striding in index order, then a fixed
// butterfly. Same layout for both activation layouts. The W+1 sums are
// independent: all their loads are issued before the first butterfly, so a
// channel with few partials costs one round trip (fused launches of many
// short requests have one partial per channel and D teams per request).
__global__ void __launch_bounds__(kTeam * kTeamsPerBlock) reduce_dw_kernel(KParams p) {
  constexpr int kMaxK = detail::kMaxFastWidth + 1;
  const int lane = threadIdx.x % kTeam;
  const int W = p.width;
  const int64_t total = static_cast<int64_t>(p.nseg) * p.dim;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * kTeamsPerBlock + threadIdx.x / kTeam; t < total;
       t += static_cast<int64_t>(gridDim.x) * kTeamsPerBlock) {
    const int64_t s = div_fast(t, p.dim);
    const int64_t d = t - s * p.dim;
    const Conv1dSegment& seg = p.segs[s];
    if (seg.ws_partial_offset < 0) continue;  // stored by the main kernel
    const int64_t nparts = seg.batch * seg.nchunks;
    const float* part = p.partials + seg.ws_partial_offset + d * nparts * (W + 1);
    float acc[kMaxK];
#pragma unroll
    for (int k = 0; k < kMaxK; ++k) acc[k] = 0.0f;
    for (int64_t i = lane; i < nparts; i += kTeam) {
      float v[kMaxK];
#pragma unroll
      for (int k = 0; k < kMaxK; ++k) v[k] = k <= W ? part[i * (W + 1) + k] : 0.0f;
#pragma unroll
      for (int k = 0; k < kMaxK; ++k) acc[k] += v[k];
    }
#pragma unroll
    for (int k = 0; k < kMaxK; ++k) acc[k] = team_sum(acc[k]);
    if (lane == 0) {
#pragma unroll
      for (int k = 0; k < kMaxK; ++k) {
        if (k < W) store_any(seg.out(Role::kDweight), d * W + k, p.gwtype, acc[k]);
        else if (k == W && p.has_bias) store_any(seg.out(Role::kDbias), d, p.gwtype, acc[k]);
      }
    }
  }
}

}  // namespace

hipError_t LaunchReduceDw(const KParams& k, hipStream_t s) {
  const hipError_t e = hipGetLastError();
  if (e != hipSuccess) return e;
  const int64_t teams = static_cast<int64_t>(k.nseg) * k.dim;
  reduce_dw_kernel<<<GridFor((teams + kTeamsPerBlock - 1) / kTeamsPerBlock), kTeam * kTeamsPerBlock, 0, s>>>(k);
  return hipGetLastError();
}

}  // namespace conv1d::kernels::dev
