// Backward, channel-first short rows on the vector path where teams walk
// runs of tiles (BwdShortTraits::kPersist true: fp16/bf16): bwd_cf_run_team,
// no more blocks than the device holds at once.
#include "kernels/bwd_cf_short_step.h"

namespace conv1d::kernels::dev {
namespace {

using detail::kTeam;
using detail::WidthSwitch;

// Short rows on the vector path where BwdShortPersist (fp16/bf16 by
// default): as bwd_cf_rows_team, but a team walks nrt consecutive rows of
// one segment from row_begin (a run of whole tiles) with one ring across
// the run (ShortWalk, bwd_cf_short_step). The rows come in groups of kTeam
// (lpr steps): at a group's first step lane l loads the parameters of the
// group's row l.
template <class T, int W, bool kSilu>
__device__ __forceinline__ void bwd_cf_run_team(const KParams& p, const Conv1dSegment& seg,
                                                 int64_t row_begin, int nrt, int lane,
                                                 uint4 (*stage)[2][kTeam], RowSums<W>& sums) {
  ShortWalk<T> wk(seg, row_begin, nrt, lane, stage);
  wk.start();
  float wl[W], bl, il[W - 1], fl[W - 1];
  constexpr int kG = detail::kBwdShortSumSteps;
#pragma unroll 1
  for (int st = 0; st < wk.nsteps; ++st) {
    if ((st & (wk.lpr - 1)) == 0) {
      const int g0 = st * wk.rps;  // the group's first row in the run
      load_short_row<T, W>(p, seg, row_begin + g0 + lane, g0 + lane < nrt, wl, bl, il, fl);
    }
    uint4 xb, db;
    wk.take(st, xb, db);
    const int rr = st * wk.rps + wk.sub;
    const int64_t r = row_begin + rr;
    bwd_cf_short_step<T, W>(p, wk, st, xb, db, wl, bl, il, fl, rr, rr & (kTeam - 1), r, sums,
                            std::integral_constant<bool, kSilu>{});
    wk.next_out();
    if ((st & (kG - 1)) == kG - 1 || st + 1 == wk.nsteps) {
      flush_row_sums<T, W>(p, wk, sums, row_begin, st & ~(kG - 1), (st & (kG - 1)) + 1);
    }
  }
  wk.finish();  // the ring is free for the team's next run
}


template <class T, int W>
__global__ void __launch_bounds__(kTeam * detail::BwdShortTeams(sizeof(typename T::S)),
                                  detail::BwdShortMinBlocks(sizeof(typename T::S)))
    bwd_cf_run_kernel(KParams p) {
  gpu_allow_dependents();  // the next launch may take the SMs this one frees
  constexpr int kTeams = detail::BwdShortTeams(sizeof(typename T::S));
  // Each team's ring of in-flight steps (bwd_cf_run_team).
  __shared__ uint4 stage[kTeams][detail::kBwdShortPrefetch + 1][2][kTeam];
  // Each team's dweight/dbias terms of its last steps (flush_row_sums).
  __shared__ RowSums<W> sums[kTeams];
  const int lane = threadIdx.x % kTeam;
  const int team = threadIdx.x / kTeam;
  const int64_t ntiles = p.total_tiles - p.tile_begin;
  // Team g of G takes the contiguous tiles [T * g / G, T * (g + 1) / G)
  // and walks each segment's part of them as one run (bwd_cf_run_team),
  // so the ring keeps running from tile to tile; the launcher sizes the
  // grid to the blocks the device holds at once, which gives every team
  // an even share.
  const int64_t nteams = static_cast<int64_t>(gridDim.x) * kTeams;
  const int64_t gteam = static_cast<int64_t>(blockIdx.x) * kTeams + team;
  int64_t tile = p.tile_begin + ntiles * gteam / nteams;
  for (;;) {
    // Recomputed per run rather than kept live across the walk.
    const int64_t tile_end = p.tile_begin + ntiles * (gteam + 1) / nteams;
    if (tile >= tile_end) break;
    const int idx = find_tile_segment(p, tile, lane);
    const Conv1dSegment& seg = p.segs[idx];
    const int64_t local = tile - seg.tile_begin;
    if (!is_short_tile(seg)) {
      // Another kernel's segment inside the planner's short range.
      tile = idx + 1 < p.nseg ? p.segs[idx + 1].tile_begin : tile_end;
      continue;
    }
    const int64_t rpt = seg.rows_per_tile;
    const int64_t nrows = seg.batch * p.dim;
    const int64_t seg_tiles = (nrows + rpt - 1) / rpt;
    int64_t run = seg_tiles - local < tile_end - tile ? seg_tiles - local : tile_end - tile;
    if (run > (int64_t{1} << 30) / rpt) run = (int64_t{1} << 30) / rpt;  // int32 row counts
    const int64_t row_begin = local * rpt;
    const int64_t row_end = (local + run) * rpt < nrows ? (local + run) * rpt : nrows;
    const int nrt = static_cast<int>(row_end - row_begin);
    if constexpr (detail::HaloInVector(W, kVecElts<T>)) {
      BoolSwitch(p.silu, [&](auto silu) {
        bwd_cf_run_team<T, W, decltype(silu)::value>(p, seg, row_begin, nrt, lane, stage[team], sums[team]);
      });
    }
    tile += run;
  }
}


}  // namespace

template <class T>
hipError_t LaunchBwdCfRun(const KParams& k, hipStream_t s) {
  constexpr int kTeams = detail::BwdShortTeams(sizeof(typename T::S));
  unsigned grid = GridFor((k.total_tiles - k.tile_begin + kTeams - 1) / kTeams);
  // No more blocks than the device holds at once (each team an even share).
  int dev = 0, sms = 0;
  if (hipGetDevice(&dev) == hipSuccess &&
      hipDeviceGetAttribute(&sms, hipDeviceAttributeMultiprocessorCount, dev) == hipSuccess && sms > 0) {
    const unsigned resident =
        static_cast<unsigned>(sms) * detail::BwdShortMinBlocks(sizeof(typename T::S));
    if (grid > resident) grid = resident;
  }
  hipError_t e = hipSuccess;
  // Always in stream order: the exit wait a dependent needs (LaunchKernel)
  // grew this kernel by 130-380 instructions and cost 64 x 1x2048x128 bf16
  // backward 2 points of copy speed (H200, 2026-11-29).
  const bool launched = WidthSwitch(k.width, [&](auto w) {
    e = LaunchKernel(false, bwd_cf_run_kernel<T, decltype(w)::value>, grid, kTeam * kTeams, s, k);
  });
  return launched ? e : hipErrorInvalidValue;
}

template hipError_t LaunchBwdCfRun<F16>(const KParams&, hipStream_t);
template hipError_t LaunchBwdCfRun<BF16>(const KParams&, hipStream_t);

}  // namespace conv1d::kernels::dev
