// Backward, channel-first short rows on the vector path where teams take
// one tile each (BwdShortTraits::kPersist false: fp32): bwd_cf_rows_team.
#include "kernels/bwd_cf_short_step.h"

namespace conv1d::kernels::dev {
namespace {

using detail::kTeam;
using detail::WidthSwitch;

// Short rows on the vector path (rows_per_tile > 1; planner: a row fits in
// lanes_per_row lanes of one 16-byte vector each, lpr a power of two): a
// team owns the rows_per_tile (<= kTeam) consecutive rows of tile `local`
// of one segment and walks them (ShortWalk, bwd_cf_short_step). Their
// weights, bias and states are loaded once, lane l holding row l's.
template <class T, int W>
__device__ __forceinline__ void bwd_cf_rows_team(const KParams& p, const Conv1dSegment& seg,
                                                 int64_t local, int lane,
                                                 uint4 (*stage)[2][kTeam], RowSums<W>& sums) {
  const int64_t nrows = seg.batch * p.dim;
  const int64_t row_begin = local * seg.rows_per_tile;
  const int64_t left = nrows - row_begin;
  const int nrt = left < seg.rows_per_tile ? static_cast<int>(left) : seg.rows_per_tile;
  ShortWalk<T> wk(seg, row_begin, nrt, lane, stage);
  wk.start();
  float wl[W], bl, il[W - 1], fl[W - 1];
  load_short_row<T, W>(p, seg, row_begin + lane, lane < nrt, wl, bl, il, fl);
  constexpr int kG = detail::kBwdShortSumSteps;
#pragma unroll 1
  for (int st = 0; st < wk.nsteps; ++st) {
    uint4 xb, db;
    wk.take(st, xb, db);
    const int rr = st * wk.rps + wk.sub;  // < kTeam: the tile's rows are one group
    const int64_t r = row_begin + rr;
    bwd_cf_short_step<T, W>(p, wk, st, xb, db, wl, bl, il, fl, rr, rr, r, sums, p.silu);
    wk.next_out();
    if ((st & (kG - 1)) == kG - 1 || st + 1 == wk.nsteps) {
      flush_row_sums<T, W>(p, wk, sums, row_begin, st & ~(kG - 1), (st & (kG - 1)) + 1);
    }
  }
  wk.finish();  // the ring is free for the team's next tile
}


template <class T, int W>
__global__ void __launch_bounds__(kTeam * detail::BwdShortTeams(sizeof(typename T::S)),
                                  detail::BwdShortMinBlocks(sizeof(typename T::S)))
    bwd_cf_short_kernel(KParams p) {
  gpu_allow_dependents();  // the next launch may take the SMs this one frees
  constexpr int kTeams = detail::BwdShortTeams(sizeof(typename T::S));
  // Each team's ring of in-flight steps (bwd_cf_rows_team).
  __shared__ uint4 stage[kTeams][detail::kBwdShortPrefetch + 1][2][kTeam];
  // Each team's dweight/dbias terms of its last steps (flush_row_sums).
  __shared__ RowSums<W> sums[kTeams];
  const int lane = threadIdx.x % kTeam;
  const int team = threadIdx.x / kTeam;
  const int64_t ntiles = p.total_tiles - p.tile_begin;
  // One tile per team.
  for (int64_t blk = blockIdx.x; blk * kTeams < ntiles; blk += gridDim.x) {
    const int64_t tile = p.tile_begin + blk * kTeams + team;
    if (tile >= p.total_tiles) continue;
    // By reference: fields are read where used (the dweight pointers only
    // at the end), which keeps them out of registers across the tile.
    const Conv1dSegment& seg = p.segs[find_tile_segment(p, tile, lane)];
    if (!is_short_tile(seg)) continue;
    // The planner gives this kernel no tile when the halo exceeds a vector.
    if constexpr (detail::HaloInVector(W, kVecElts<T>)) {
      bwd_cf_rows_team<T, W>(p, seg, tile - seg.tile_begin, lane, stage[team], sums[team]);
    }
  }
  gpu_exit_after_prerequisites();  // see LaunchKernel
}


}  // namespace

template <class T>
hipError_t LaunchBwdCfShort(const KParams& k, hipStream_t s) {
  constexpr int kTeams = detail::BwdShortTeams(sizeof(typename T::S));
  unsigned grid = GridFor((k.total_tiles - k.tile_begin + kTeams - 1) / kTeams);
  hipError_t e = hipSuccess;
  const bool launched = WidthSwitch(k.width, [&](auto w) {
    e = LaunchKernel(k.after_previous, bwd_cf_short_kernel<T, decltype(w)::value>, grid, kTeam * kTeams, s, k);
  });
  return launched ? e : hipErrorInvalidValue;
}

template hipError_t LaunchBwdCfShort<F32>(const KParams&, hipStream_t);

}  // namespace conv1d::kernels::dev
