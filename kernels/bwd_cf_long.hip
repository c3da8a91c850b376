// Backward, channel-first scalar path (bwd_cf_kernel): rows the vector
// kernels do not take (misaligned, or short rows whose length is not a
// whole number of vectors); a team per tile of per_lane elements per lane
// of one row chunk, each lane loading its own halos (bwd_cf_team_loads).
// dweight/dbias go to per-(row, chunk) partials.
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
                                  detail::BwdCfTraits<W>::kMinBlocks) bwd_cf_kernel(KParams p) {
  gpu_allow_dependents();  // the next launch may take the SMs this one frees
  const int lane = threadIdx.x % kTeam;
  const int team = threadIdx.x / kTeam;
  const int64_t ntiles = p.total_tiles - p.tile_begin;
  for (int64_t blk = blockIdx.x; blk * kTeamsPerBlock < ntiles; blk += gridDim.x) {
    const int64_t tile = p.tile_begin + blk * kTeamsPerBlock + team;
    if (tile >= p.total_tiles) continue;
    const Conv1dSegment seg = p.segs[find_tile_segment(p, tile, lane)];
    if (is_short_tile(seg) || is_stream_tile(seg)) continue;
    bwd_cf_team_loads<T, W>(p, seg, tile - seg.tile_begin, lane);
  }
}


}  // namespace

template <class T>
hipError_t LaunchBwdCfLong(const KParams& k, hipStream_t s) {
  constexpr int kTeams = kTeamsPerBlock;
  unsigned grid = GridFor((k.total_tiles - k.tile_begin + kTeams - 1) / kTeams);
  hipError_t e = hipSuccess;
  // The first of a run's launches (bwd_launch.hip), so never a dependent.
  const bool launched = WidthSwitch(k.width, [&](auto w) {
    e = LaunchKernel(false, bwd_cf_kernel<T, decltype(w)::value>, grid, kTeam * kTeams, s, k);
  });
  return launched ? e : hipErrorInvalidValue;
}

template hipError_t LaunchBwdCfLong<F32>(const KParams&, hipStream_t);
template hipError_t LaunchBwdCfLong<F16>(const KParams&, hipStream_t);
template hipError_t LaunchBwdCfLong<BF16>(const KParams&, hipStream_t);

}  // namespace conv1d::kernels::dev
