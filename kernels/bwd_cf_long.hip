// Backward, channel-first long rows the stream kernel does not take, and
// the scalar path (bwd_cf_kernel): a team per tile of per_lane slots of one
// row chunk, each lane loading its own halos (bwd_cf_team_loads): fp32
// vector rows at W = 6..8 and scalar rows of every type. dweight/dbias go
// to per-(row, chunk) partials.
#include "kernels/bwd_common.h"
#include "kernels/bwd_cf_loads.h"

namespace conv1d::kernels::dev {
namespace {

using detail::kClCols;
using detail::kClRows;
using detail::kTeam;
using detail::kTeamsPerBlock;
using detail::WidthSwitch;

template <class T, int W>
__global__ void __launch_bounds__(kTeam * kTeamsPerBlock,
                                  (detail::BwdCfTraits<sizeof(typename T::S), W>::kMinBlocks)) bwd_cf_kernel(KParams p) {
  const int lane = threadIdx.x % kTeam;
  const int team = threadIdx.x / kTeam;
  const int64_t ntiles = p.total_tiles - p.tile_begin;
  for (int64_t blk = blockIdx.x; blk * kTeamsPerBlock < ntiles; blk += gridDim.x) {
    const int64_t tile = p.tile_begin + blk * kTeamsPerBlock + team;
    if (tile >= p.total_tiles) continue;
    const Conv1dSegment seg = p.segs[find_segment_team(p.segs, p.nseg, tile, lane)];
    if (is_short_tile(seg) || is_stream_tile<T, W>(seg)) continue;
    const int64_t local = tile - seg.tile_begin;
    if constexpr (!detail::BwdStreamTakes(sizeof(typename T::S), W)) {
      // fp32 vector rows past W = 5 (per the planner): halos longer than a
      // vector, which each lane loads around its vectors.
      if (seg.vec) {
        bwd_cf_team_loads<T, kVecElts<T>, W>(p, seg, local, lane);
        continue;
      }
    }
    bwd_cf_team_loads<T, 1, W>(p, seg, local, lane);
  }
}


}  // namespace

template <class T>
hipError_t LaunchBwdCfLong(const KParams& k, hipStream_t s) {
  constexpr int kTeams = kTeamsPerBlock;
  unsigned grid = GridFor((k.total_tiles - k.tile_begin + kTeams - 1) / kTeams);
  const bool launched = WidthSwitch(k.width, [&](auto w) {
    bwd_cf_kernel<T, decltype(w)::value><<<grid, kTeam * kTeams, 0, s>>>(k);
  });
  return launched ? hipGetLastError() : hipErrorInvalidValue;
}

template hipError_t LaunchBwdCfLong<F32>(const KParams&, hipStream_t);
template hipError_t LaunchBwdCfLong<F16>(const KParams&, hipStream_t);
template hipError_t LaunchBwdCfLong<BF16>(const KParams&, hipStream_t);

}  // namespace conv1d::kernels::dev
