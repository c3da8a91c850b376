// Forward, channel-first rows on the scalar path (fwd_cf_kernel): long
// rows a 32-lane team per row chunk of per_lane elements per lane
// (fwd_cf_team), short rows a tile of rows at a time through shared memory
// (fwd_cf_rows_staged). Vector rows, long or short, have their own
// kernels (fwd_cf_stream.hip, fwd_cf_short.hip). fp32 launches cover every
// tile from 0 and skip the others' ranges; 16-bit launches start at the
// long range.
#include "kernels/fwd_common.h"

namespace conv1d::kernels::dev {
namespace {

using detail::kClCols;
using detail::kClRows;
using detail::kTeam;
using detail::kTeamsPerBlock;
using detail::WidthSwitch;


// Short scalar rows (rows_per_tile > 1, not the vector path): a team owns
// the tile's rows [base, base + rows) of one segment, at most
// kMaxPerLaneFwd * kTeam / lanes_per_row of them, each no longer than
// lanes_per_row (>= kMinLanesPerRow). The tile's x, y, initial and final
// states are each one contiguous block, so they move between memory and the
// team's shared staging in coalesced passes of whole lines, every load
// issued before the first store; lanes then compute one element per row
// slot from staging.
// Whole-line transfers matter most when the tensors live in host memory
// that the kernel reads and writes in place over the bus, where a lane's own
// strided row state or a 32-byte piece costs a bus transfer each.
// Staging of one team: x (then y) of at most kShortRowMaxElems elements,
// and the initial states of at most kShortRowMaxRows rows.
inline constexpr int kShortRowMaxElems = detail::kMaxPerLaneFwd * kTeam;
inline constexpr int kShortRowMaxRows =
    detail::kMaxPerLaneFwd * (kTeam / detail::kMinLanesPerRow);
static_assert(kShortRowMaxRows <= kTeam, "lane l holds the weights of the tile's row l");
template <int W>
inline constexpr int kShortRowStageFloats = kShortRowMaxElems + kShortRowMaxRows * (W - 1);

template <class T, int W>
__device__ __forceinline__ void fwd_cf_rows_staged(const KParams& p, const Conv1dSegment& seg,
                                                   int64_t local, int lane, float* sm) {
  using S = typename T::S;
  constexpr int kMax = detail::kMaxPerLaneFwd;
  constexpr int kH = W - 1;
  constexpr int kPassesX = kShortRowMaxElems / kTeam;       // rows * L elements
  constexpr int kPassesS = (kShortRowMaxRows * kH + kTeam - 1) / kTeam;  // rows * kH
  float* smx = sm;                      // x, then y: [rows][L]
  float* sms = sm + kShortRowMaxElems;  // initial states: [rows][kH]
  const int64_t L = seg.seqlen;
  const int lpr = seg.lanes_per_row;
  const int64_t nrows = seg.batch * p.dim;
  const int64_t base = local * seg.rows_per_tile;
  const int rows = static_cast<int>(nrows - base < seg.rows_per_tile ? nrows - base
                                                                     : seg.rows_per_tile);
  const int nx = rows * static_cast<int>(L);
  const int ns = rows * kH;
  const S* xt = static_cast<const S*>(seg.in(Role::kX)) + base * L;
  const S* it = p.has_init ? static_cast<const S*>(seg.in(Role::kInitialStates)) + base * kH : nullptr;

  gpu_team_sync();  // the team's previous tile is done with sm
  S xv[kPassesX], iv[kPassesS > 0 ? kPassesS : 1];
#pragma unroll
  for (int k = 0; k < kPassesX; ++k) {
    const int i = lane + k * kTeam;
    if (i < nx) xv[k] = xt[i];
  }
#pragma unroll
  for (int k = 0; k < kPassesS; ++k) {
    const int i = lane + k * kTeam;
    if (it != nullptr && i < ns) iv[k] = it[i];
  }
  // Weights: lane l holds those of the tile's row l (slots fetch theirs by
  // shuffle).
  float wl[W] = {}, bl = 0.0f;
  if (lane < rows) {
    const int64_t d = mod_fast(base + lane, p.dim);
#pragma unroll
    for (int k = 0; k < W; ++k) wl[k] = load_any(seg.in(Role::kWeight), d * W + k, p.wtype);
    if (p.has_bias) bl = load_any(seg.in(Role::kBias), d, p.wtype);
  }
#pragma unroll
  for (int k = 0; k < kPassesX; ++k) {
    const int i = lane + k * kTeam;
    if (i < nx) smx[i] = T::to_f(xv[k]);
  }
#pragma unroll
  for (int k = 0; k < kPassesS; ++k) {
    const int i = lane + k * kTeam;
    if (i < ns) sms[i] = it != nullptr ? T::to_f(iv[k]) : 0.0f;
  }
  gpu_team_sync();

  // x̃ at position q of tile row r: x, or the initial state for q < 0.
  auto xt_at = [&](int r, int64_t q) {
    return q >= 0 ? smx[r * L + q] : sms[r * kH + kH + q];
  };
  const int pos = lane & (lpr - 1);
  const int rstep = kTeam / lpr;
  float yv[kMax];
#pragma unroll
  for (int j = 0; j < kMax; ++j) {
    const int r = lane / lpr + j * rstep;
    float w[W];
#pragma unroll
    for (int k = 0; k < W; ++k) w[k] = gpu_shfl(wl[k], r < kTeam ? r : 0, kTeam);
    const float b = gpu_shfl(bl, r < kTeam ? r : 0, kTeam);
    yv[j] = 0.0f;
    if (r < rows && pos < L) {
      float z = b;
#pragma unroll
      for (int k = 0; k < W; ++k) z += w[k] * xt_at(r, pos - kH + k);
      yv[j] = act_fwd(z, p.silu);
    }
  }
  // Final states: x̃ at L-(W-1) .. L-1 of each row, one coalesced pass.
  if (p.ret_final) {
    S* ft = static_cast<S*>(seg.out(Role::kFinalStates)) + base * kH;
#pragma unroll
    for (int k = 0; k < kPassesS; ++k) {
      const int i = lane + k * kTeam;
      if (i < ns) ft[i] = T::from_f(xt_at(i / kH, L - kH + i % kH));
    }
  }
  gpu_team_sync();  // every read of x from smx is done
#pragma unroll
  for (int j = 0; j < kMax; ++j) {
    const int r = lane / lpr + j * rstep;
    if (r < rows && pos < L) smx[r * L + pos] = yv[j];
  }
  gpu_team_sync();
  S* yt = static_cast<S*>(seg.out(Role::kY)) + base * L;
#pragma unroll
  for (int k = 0; k < kPassesX; ++k) {
    const int i = lane + k * kTeam;
    if (i < nx) yt[i] = T::from_f(smx[i]);
  }
}

// Long rows on the scalar path (rows the vector path cannot take: x or y
// not 16-byte aligned, or 16-bit rows whose halo exceeds a vector and
// whose length is no multiple of it, among others): a team owns one row
// chunk, `per_lane` elements (slots) per lane, slot j of lane l at chunk
// offset (j * kTeam + l). Every load is issued before the first use. The
// left halo (x̃ at pos-(W-1) .. pos-1) comes from the previous lane by
// shuffle at W <= 2 (lane 31 feeding lane 0 of the next slot; the chunk's
// first lane loads its own), else each lane loads its own (hits L1).
template <class T, int W>
__device__ __forceinline__ void fwd_cf_team(const KParams& p, const Conv1dSegment& seg,
                                            int64_t local, int lane) {
  using S = typename T::S;
  constexpr int kMax = detail::kMaxPerLaneFwd;
  constexpr int kH = W - 1;
  constexpr bool kShuffle = kH <= 1;
  const int64_t L = seg.seqlen;
  const S* x = static_cast<const S*>(seg.in(Role::kX));
  S* y = static_cast<S*>(seg.out(Role::kY));

  const int V = seg.per_lane;
  const int64_t nchunks = seg.nchunks;
  const int64_t row0 = div_fast(local, nchunks);
  const int64_t chunk = local - row0 * nchunks;
  const S* xrow = x + row0 * L;
  const int64_t pos0 = chunk * static_cast<int64_t>(kTeam * V) + lane;
  const bool first = lane == 0;
  bool on[kMax];
#pragma unroll
  for (int j = 0; j < kMax; ++j) on[j] = j < V && pos0 + j * kTeam < L;
  // hist: the halos this lane loads itself (every slot, or slot 0 of the
  // chunk's first lane when they come by shuffle).
  constexpr int kOwn = kShuffle ? 1 : kMax;
  S xs[kMax];
  float hist[kOwn][kH > 0 ? kH : 1];
#pragma unroll
  for (int j = 0; j < kMax; ++j) xs[j] = on[j] ? xrow[pos0 + j * kTeam] : T::from_f(0.0f);
#pragma unroll
  for (int j = 0; j < kOwn; ++j) {
#pragma unroll
    for (int i = 0; i < kH; ++i) hist[j][i] = 0.0f;
    if (on[j] && (!kShuffle || first)) {
#pragma unroll
      for (int i = 0; i < kH; ++i) {
        hist[j][i] = x_tilde_cf<T>(p, seg, xrow, row0, pos0 + j * kTeam - kH + i, W);
      }
    }
  }
  float w[W], bias = 0.0f;
  {
    const int64_t d = mod_fast(row0, p.dim);
#pragma unroll
    for (int k = 0; k < W; ++k) w[k] = load_any(seg.in(Role::kWeight), d * W + k, p.wtype);
    if (p.has_bias) bias = load_any(seg.in(Role::kBias), d, p.wtype);
  }
  S* yrow = y + row0 * L;
#pragma unroll
  for (int j = 0; j < kMax; ++j) {
    float xf[kH + 1];  // x̃ at pos-(W-1) .. pos
    xf[kH] = T::to_f(xs[j]);
    if constexpr (kShuffle) {
      const int src = (lane + kTeam - 1) & (kTeam - 1);
#pragma unroll
      for (int i = 0; i < kH; ++i) {
        float give = xf[kH];
        // Lane 31 also feeds lane 0 of the next slot of the same chunk.
        if (j > 0 && lane == kTeam - 1) give = T::to_f(xs[j - 1]);
        const float got = gpu_shfl(give, src, kTeam);
        xf[i] = (first && j == 0) ? hist[0][i] : got;
      }
    } else {
#pragma unroll
      for (int i = 0; i < kH; ++i) xf[i] = hist[j][i];
    }
    if (on[j]) {
      yrow[pos0 + j * kTeam] = T::from_f(act_fwd(preact(w, bias, xf, 0), p.silu));
    }
  }
  if (p.ret_final && first && chunk == nchunks - 1) write_final_cf<T, W>(p, seg, xrow, row0);
}

template <class T, int W>
__global__ void __launch_bounds__(kTeam * kTeamsPerBlock, detail::FwdCfTraits<W>::kMinBlocks) fwd_cf_kernel(KParams p) {
  gpu_allow_dependents();  // the next launch may take the SMs this one frees
  __shared__ float stage[kTeamsPerBlock][kShortRowStageFloats<W>];
  const int lane = threadIdx.x % kTeam;
  const int team = threadIdx.x / kTeam;
  auto run = [&](int64_t tile) {
    const Conv1dSegment seg = p.segs[find_tile_segment(p, tile, lane)];
    if (is_stream_tile(seg) || is_short_tile(seg)) return;
    const int64_t local = tile - seg.tile_begin;
    // Scalar rows only: every vector-path row is a short or stream tile.
    if (seg.rows_per_tile > 1) fwd_cf_rows_staged<T, W>(p, seg, local, lane, stage[team]);
    else fwd_cf_team<T, W>(p, seg, local, lane);
  };
  if constexpr (sizeof(typename T::S) == 2) {
    // From p.tile_begin (the stream range split off); each team walks its
    // own tiles (no block-wide barrier), which keeps the range start out of
    // the registers of the loop (spilled otherwise at W = 4).
    const int64_t stride = static_cast<int64_t>(gridDim.x) * kTeamsPerBlock;
    for (int64_t tile = p.tile_begin + static_cast<int64_t>(blockIdx.x) * kTeamsPerBlock + team;
         tile < p.total_tiles; tile += stride) {
      run(tile);
    }
  } else {
    // fp32: from tile 0, where the long range starts (its family is first
    // in the table), skipping other families' tiles (none before
    // long_tile_end when the table is ordered).
    for (int64_t blk = blockIdx.x; blk * kTeamsPerBlock < p.total_tiles; blk += gridDim.x) {
      const int64_t tile = blk * kTeamsPerBlock + team;
      if (tile < p.total_tiles) run(tile);
    }
  }
}


}  // namespace

template <class T>
hipError_t LaunchFwdCfLong(const KParams& k, hipStream_t s) {
  constexpr int kTeams = kTeamsPerBlock;
  const unsigned grid = GridFor((k.total_tiles - k.tile_begin + kTeams - 1) / kTeams);
  hipError_t e = hipSuccess;
  // The first of a run's launches (fwd_launch.hip), so never a dependent.
  const bool launched = WidthSwitch(k.width, [&](auto w) {
    e = LaunchKernel(false, fwd_cf_kernel<T, decltype(w)::value>, grid, kTeam * kTeams, s, k);
  });
  return launched ? e : hipErrorInvalidValue;
}

template hipError_t LaunchFwdCfLong<F32>(const KParams&, hipStream_t);
template hipError_t LaunchFwdCfLong<F16>(const KParams&, hipStream_t);
template hipError_t LaunchFwdCfLong<BF16>(const KParams&, hipStream_t);

}  // namespace conv1d::kernels::dev
