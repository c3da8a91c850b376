// Backward, channel-first long rows and the scalar path (bwd_cf_kernel):
// a team per tile of per_lane slots of one row chunk; fp32 long vector rows
// pass halos between lanes (bwd_cf_team; rows of any length on the shifted
// vector grid, kVecShifted), the scalar path loads them
// (bwd_cf_team_loads). dweight/dbias go to per-(row, chunk) partials.
#include "kernels/bwd_common.h"
#include "kernels/bwd_cf_loads.h"

namespace conv1d::kernels::dev {
namespace {

using detail::kClCols;
using detail::kClRows;
using detail::kTeam;
using detail::kTeamsPerBlock;
using detail::WidthSwitch;

// Vector path (N >= W-1): as bwd_cf_team_loads, but the left x halo comes
// from the previous lane and the right g halo (g at pos+N .. pos+N+W-2)
// from the next lane by shuffle, so g is computed once per element. Only
// the lane ending a chunk computes its W-1 right-halo g values itself.
//
// Shifted rows (seg.vec == kVecShifted, single-row tiles): L is not a whole
// number of vectors, so rows start between 16-byte boundaries. Slots then
// sit on the 16-byte grid that starts o = (row start mod 16 bytes) elements
// before the row, as in the forward (fwd_cf_stream_team): in the vectors that
// straddle the row's ends, x before the row is replaced by x̃ (initial
// state or zero) and past it by zero, dout outside the row by zero (so g
// is zero there and adds nothing to dx or dweight), and dx is stored
// element by element.
//
// kFull (single-row tiles only): 0 = any tile; 1 (SiLU) or 2 (identity) =
// a full tile (per_lane == MaxPerLaneBwd, every slot inside the row) that
// neither dfinal_states (last chunk) nor dinitial_states (chunk 0) touches.
// Full tiles need no per-slot or per-element range checks, and the
// activation is known at compile time. For non-multi tiles the caller
// passes the row and chunk (local = row * nchunks + chunk).
template <class T, int N, int W, bool kMulti, int kFull = 0>
__device__ __forceinline__ void bwd_cf_team(const KParams& p, const Conv1dSegment& seg,
                                            int64_t local, int lane, int64_t row_in = 0,
                                            int64_t chunk_in = 0) {
  using S = typename T::S;
  constexpr int kMax = detail::MaxPerLaneBwd(sizeof(typename T::S), W);
  constexpr int kH = W - 1;
  constexpr bool kFullTile = kFull != 0;
  static_assert(N >= kH, "vector path needs N >= W-1");
  static_assert(!(kMulti && kFullTile), "full tiles are single-row");
  const bool silu = kFullTile ? kFull == 1 : p.silu;
  const int64_t L = seg.seqlen;
  const int64_t B = seg.batch;
  const int64_t nrows = B * p.dim;
  const S* x = static_cast<const S*>(seg.in(Role::kX));
  const S* dout = static_cast<const S*>(seg.in(Role::kDout));

  int64_t row0, pos0, rstep, pstep, chunk = 0, nchunks = 1, tile_row0;
  int V = kMax, lpr = kTeam;
  bool first, last;  // slot 0 starts / slot V-1 ends the lane's chunk (non-multi)
  if constexpr (kMulti) {
    lpr = seg.lanes_per_row;
    tile_row0 = local * seg.rows_per_tile;
    row0 = tile_row0 + lane / lpr;
    pos0 = static_cast<int64_t>(lane & (lpr - 1)) * N;
    rstep = kTeam / lpr;
    pstep = 0;
    first = pos0 == 0;
    last = false;
  } else {
    V = kFullTile ? kMax : seg.per_lane;
    nchunks = seg.nchunks;
    row0 = row_in;
    tile_row0 = row0;
    chunk = chunk_in;
    pos0 = chunk * static_cast<int64_t>(kTeam * V * N) + lane * N;
    if (seg.vec == kVecShifted) pos0 -= row_shift<S>(x + row0 * L);
    rstep = 0;
    pstep = kTeam * N;
    first = lane == 0;
    last = lane == kTeam - 1;
  }
  const int64_t base = row0 * L + pos0;
  const int64_t jstride = rstep * L + pstep;
  bool slot[kMax], on[kMax];
#pragma unroll
  for (int j = 0; j < kMax; ++j) {
    slot[j] = kMulti ? tile_row0 + j * rstep < nrows : j < V;
    on[j] = (kMulti ? row0 + j * rstep < nrows : j < V) && pos0 + j * pstep < L;
    if constexpr (kFullTile) slot[j] = on[j] = true;
  }
  S xs[kMax][N], ds[kMax][N];
#pragma unroll
  for (int j = 0; j < kMax; ++j) {
    if (on[j]) {
      load_raw<T, N>(x + base + j * jstride, xs[j]);
      load_raw<T, N>(dout + base + j * jstride, ds[j]);
    } else {
#pragma unroll
      for (int e = 0; e < N; ++e) xs[j][e] = ds[j][e] = T::from_f(0.0f);
    }
  }
  // Own halos: x̃ left of a chunk's first lane; x and dout right of its
  // last lane (zeros past L).
  float h0[kH], xn[kH], dn[kH];
  const int64_t plast = pos0 + (V - 1) * pstep;
  const bool at_end = plast + N >= L;  // full tiles: the chunk ends the row
#pragma unroll
  for (int i = 0; i < kH; ++i) h0[i] = xn[i] = dn[i] = 0.0f;
  if constexpr (!kMulti) {
    if (first) load_left<T, N, W>(p, seg, x + row0 * L, row0, pos0, h0);
    if (last && plast + N < L) {
      load_right<T, N, W>(x + row0 * L, plast, L, xn);
      load_right<T, N, W>(dout + row0 * L, plast, L, dn);
    }
  }
  const int64_t d0 = mod_fast(row0, p.dim);
  // Weights: one row per lane for short rows (lane l holds the tile's row
  // l, at most 32 rows; slots fetch theirs by shuffle), else the row's own.
  float w[W] = {}, bias = 0.0f;
  {
    const int64_t wr = kMulti ? tile_row0 + lane : row0;
    if (!kMulti || (lane < seg.rows_per_tile && wr < nrows)) {
      const int64_t d = kMulti ? mod_fast(wr, p.dim) : d0;
#pragma unroll
      for (int k = 0; k < W; ++k) w[k] = load_any(seg.in(Role::kWeight), d * W + k, p.wtype);
      if (p.has_bias) bias = load_any(seg.in(Role::kBias), d, p.wtype);
    }
  }
  const S* dfin = static_cast<const S*>(seg.in(Role::kDfinalStates));
  const int src_prev = (lane + kTeam - 1) & (kTeam - 1);
  const int src_next = (lane + 1) & (kTeam - 1);
  const int64_t nparts = B * nchunks;
  // Slots are pipelined: slot j+1's g is computed before slot j's dx (lane
  // 31 needs the head of slot j+1's g), so at most two slots' floats are
  // live and the lane can keep kMax vectors in flight.
  float wj[kMax][W], bj[kMax];
  float xf[kMax][N + kH];  // x̃ at pos-(W-1) .. pos+N-1
  float g[kMax][N];
  float dw[W + 1];  // [W] is dbias; non-multi: summed over the slots
#pragma unroll
  for (int k = 0; k <= W; ++k) dw[k] = 0.0f;
  auto prepare = [&](const int j) {
    if constexpr (kMulti) {
      const int srcw = j * static_cast<int>(rstep) + lane / lpr;
#pragma unroll
      for (int k = 0; k < W; ++k) wj[j][k] = gpu_shfl(w[k], srcw, kTeam);
      bj[j] = gpu_shfl(bias, srcw, kTeam);
    } else {
#pragma unroll
      for (int k = 0; k < W; ++k) wj[j][k] = w[k];
      bj[j] = bias;
    }
    {
      float xv[N];
      unpack_f<T, N>(xs[j], xv);
#pragma unroll
      for (int e = 0; e < N; ++e) xf[j][kH + e] = xv[e];
    }
    float dvs[N];
    unpack_f<T, N>(ds[j], dvs);
    if constexpr (!kMulti && !kFullTile) {
      // A shifted row's vectors that straddle its ends (see above).
      mask_outside_row<T, N, kH>(p, seg, x + row0 * L, row0, pos0 + j * pstep, L, W, dvs, xf[j]);
    }
#pragma unroll
    for (int i = 0; i < kH; ++i) {
      // Lane 31 also feeds lane 0 of the next slot (its tail of slot j-1).
      float give = xf[j][N + i];
      if (!kMulti && j > 0 && last) give = T::to_f(xs[j - 1][N - kH + i]);
      const float got = gpu_shfl(give, src_prev, kTeam);
      if constexpr (kMulti) {
        float own = 0.0f;
        if (first && on[j] && p.has_init) {
          own = T::to_f(static_cast<const S*>(seg.in(Role::kInitialStates))[(row0 + j * rstep) * kH + i]);
        }
        xf[j][i] = first ? own : got;
      } else {
        xf[j][i] = (first && j == 0) ? h0[i] : got;
      }
    }
#pragma unroll
    for (int e = 0; e < N; ++e) {
      const float dv = dvs[e];
      if (silu) {
        float z = bj[j];
#pragma unroll
        for (int k = 0; k < W; ++k) z += wj[j][k] * xf[j][e + k];
        g[j][e] = grad_of(dv, z, true);
      } else {
        g[j][e] = dv;
      }
    }
  };
  prepare(0);
#pragma unroll
  for (int j = 0; j < kMax; ++j) {
    if (j + 1 < kMax) prepare(j + 1);
    const int64_t r = row0 + j * rstep;
    const int64_t pos = pos0 + j * pstep;
    // Right halo of g: from the next lane (lane 0 of the next slot for the
    // chunk's last lane), computed at the end of a chunk, zero past L.
    float gn[kH];
#pragma unroll
    for (int i = 0; i < kH; ++i) {
      float give = g[j][i];
      if (!kMulti && j + 1 < kMax && first) give = g[j + 1 < kMax ? j + 1 : j][i];
      const float got = gpu_shfl(give, src_next, kTeam);
      float gv = got;
      if (!kMulti && last && j == V - 1) {
        // g at pos+N+i from x̃ at pos+N+i-(W-1) .. pos+N+i (own tail, xn).
        float z = bj[j];
        if (silu) {
#pragma unroll
          for (int k = 0; k < W; ++k) {
            const int idx = N + i + k;
            z += wj[j][k] * (idx < N + kH ? xf[j][idx < N + kH ? idx : 0] : xn[idx >= N + kH ? idx - N - kH : 0]);
          }
        }
        gv = grad_of(dn[i], z, silu);
        if constexpr (kFullTile) gv = at_end ? 0.0f : gv;
      }
      // Full tiles: only the chunk's own tail (above) can reach past L.
      gn[i] = (kFullTile || pos + N + i < L) ? gv : 0.0f;
    }
    float dws[W + 1];
#pragma unroll
    for (int k = 0; k <= W; ++k) dws[k] = 0.0f;
    if (on[j]) {
      float dxv[N];
#pragma unroll
      for (int e = 0; e < N; ++e) {
        float acc = dx_of_g<W, N>(wj[j], g[j], gn, e);
        if (!kFullTile && p.has_dfinal) {
          const int64_t t = pos + e;
          if (t >= L - kH && t < L) acc += T::to_f(dfin[r * kH + t - (L - kH)]);
        }
        dxv[e] = acc;
        // Full tiles sum straight into the tile's total.
        float* dwt = kFullTile ? dw : dws;
        dwt[W] += g[j][e];
#pragma unroll
        for (int k = 0; k < W; ++k) dwt[k] += g[j][e] * xf[j][e + k];
      }
      S* dx_at = static_cast<S*>(seg.out(Role::kDx)) + base + j * jstride;
      if (kMulti || kFullTile || (pos >= 0 && pos + N <= L)) {
        store_f<T, N>(dx_at, dxv);
      } else {
        store_in_row<T, N>(dx_at, pos, L, dxv);
      }
      // The slot that holds t = 0 (sh elements into it on the shifted grid).
      if (!kFullTile && p.ret_dinit && pos <= 0 && pos + N > 0) {
        S* dinit = static_cast<S*>(seg.out(Role::kDinitialStates)) + r * kH;
        const int sh = static_cast<int>(-pos);
        // g at t = 0 .. kH-1 (zero past L): element t + sh of g[j] then gn.
        float g0[kH];
        window_at(g[j], gn, sh, g0);
#pragma unroll
        for (int i = 0; i < kH; ++i) {
          float acc = 0.0f;
#pragma unroll
          for (int k = 0; k <= i; ++k) acc += wj[j][k] * g0[i - k];
          if (p.has_dfinal && i >= L) acc += T::to_f(dfin[r * kH + i - L]);
          dinit[i] = T::from_f(acc);
        }
      }
    }
    if constexpr (kMulti) {
      // Partial of this slot's row: sum over its lpr lanes (xor masks below
      // lpr stay inside the row's lane group), fixed order.
      if (slot[j]) {
#pragma unroll
        for (int k = 0; k <= W; ++k) {
          for (int m = lpr / 2; m >= 1; m >>= 1) dws[k] += gpu_shfl_xor(dws[k], m, kTeam);
        }
        if (first && r < nrows) {
          const int64_t d = mod_fast(r, p.dim), b = div_fast(r, p.dim);
          if (seg.ws_partial_offset < 0) {
            // B = 1 (planner): this is the channel's whole sum. 0 + v as
            // reduce_dw_kernel adds it (same bits, -0 included).
#pragma unroll
            for (int k = 0; k < W; ++k) store_any(seg.out(Role::kDweight), d * W + k, p.gwtype, 0.0f + dws[k]);
            if (p.has_bias) store_any(seg.out(Role::kDbias), d, p.gwtype, 0.0f + dws[W]);
          } else {
            float* mine = p.partials + seg.ws_partial_offset + (d * nparts + b) * (W + 1);
#pragma unroll
            for (int k = 0; k <= W; ++k) mine[k] = dws[k];
          }
        }
      }
    } else if constexpr (!kFullTile) {
#pragma unroll
      for (int k = 0; k <= W; ++k) dw[k] += dws[k];
    }
  }

  // Partials, laid out [d][b * nchunks + chunk][W + 1] (reduce_dw_kernel).
  if constexpr (!kMulti) {
    float v[W + 1];
#pragma unroll
    for (int k = 0; k <= W; ++k) v[k] = team_sum(dw[k]);
    if (lane == 0) {
      const int64_t b = div_fast(row0, p.dim);
      float* mine = p.partials + seg.ws_partial_offset + (d0 * nparts + b * nchunks + chunk) * (W + 1);
#pragma unroll
      for (int k = 0; k <= W; ++k) mine[k] = v[k];
    }
  }
}

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
    if (is_short_tile(seg) || is_stream_tile<T>(seg)) continue;
    const int64_t local = tile - seg.tile_begin;
    if constexpr (sizeof(typename T::S) == 2) {
      if (!seg.vec) bwd_cf_team_loads<T, 1, W>(p, seg, local, lane);
    } else if (seg.vec) {
      // Halos longer than a vector (long rows only, per the planner): each
      // lane loads its own around its vectors.
      if constexpr (!detail::HaloInVector(W, kVecElts<T> + 1)) {
        bwd_cf_team_loads<T, kVecElts<T>, W>(p, seg, local, lane);
      } else {
        constexpr int N = kVecElts<T>;
        constexpr int kMax = detail::MaxPerLaneBwd(sizeof(typename T::S), W);
        const int64_t nchunks = seg.nchunks;
        const int64_t row = div_fast(local, nchunks);
        const int64_t chunk = local - row * nchunks;
        // Shifted rows: the chunk's grid begins o elements before its place.
        const int o = seg.vec == kVecShifted
                          ? row_shift(static_cast<const typename T::S*>(seg.in(Role::kX)) + row * seg.seqlen)
                          : 0;
        // A full tile lies inside the row and touches neither state: by
        // position, as a shifted row's planned chunks may end with one
        // wholly past the row (the planner counts up to a vector more).
        const int64_t span = kTeam * kMax * N;
        const int64_t end = (chunk + 1) * span - o;  // the tile's end in the row
        const bool full = seg.per_lane == kMax && chunk * span >= o && end <= seg.seqlen &&
                          !(p.has_dfinal && end > seg.seqlen - (W - 1)) && !(p.ret_dinit && chunk == 0);
        if (!full) bwd_cf_team<T, N, W, false, 0>(p, seg, local, lane, row, chunk);
        else if (p.silu) bwd_cf_team<T, N, W, false, 1>(p, seg, local, lane, row, chunk);
        else bwd_cf_team<T, N, W, false, 2>(p, seg, local, lane, row, chunk);
      }
    } else {
      bwd_cf_team_loads<T, 1, W>(p, seg, local, lane);
    }
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
