// Backward kernels of the fast path (W = 2..4) over a ragged segment table:
// dx, dweight, dbias, dinitial_states (with dfinal_states flowing in) in one
// launch plus a small reduction. dweight/dbias are deterministic: each work
// unit writes fp32 partials to the workspace, and reduce_dw_kernel sums each
// channel's partials of its own segment in a fixed order.
#include <type_traits>

#include "kernels/conv1d_device.h"

namespace conv1d::kernels {
namespace {

using namespace dev;
using detail::kClCols;
using detail::kClRows;
using detail::kTeam;
using detail::kTeamsPerBlock;

__device__ __forceinline__ float grad_of(float dout, float z, bool silu) {
  return silu ? silu_backward_f(dout, z) : dout;
}

// Slots as in the forward team (fwd_cf_team): per_lane consecutive vectors
// of one row chunk, or one vector of each of rows_per_tile short rows. Each
// lane loads its x vector with W-1 halo elements on both sides and its dout
// vector with W-1 to the right (halos hit L1), so it can compute g on
// pos .. pos+N+W-2 and dx on pos .. pos+N-1 without talking to other lanes.
template <class T, int N, int W>
__device__ __forceinline__ void bwd_cf_team_loads(const KParams& p, const Conv1dSegment& seg,
                                            int64_t local, int lane) {
  using S = typename T::S;
  constexpr int kMax = detail::MaxPerLaneBwd(sizeof(typename T::S));
  const int64_t L = seg.seqlen;
  const int64_t B = seg.batch;
  const int V = seg.per_lane;
  const bool multi = seg.rows_per_tile > 1;
  const int64_t nchunks = seg.nchunks;
  const int64_t nrows = B * p.dim;
  const int64_t row0 = multi ? local * seg.rows_per_tile : local / nchunks;
  const int64_t chunk = multi ? 0 : local - row0 * nchunks;
  const int64_t c0 = chunk * static_cast<int64_t>(kTeam * V * N);
  const S* x = static_cast<const S*>(seg.in(Role::kX));
  const S* dout = static_cast<const S*>(seg.in(Role::kDout));

  int64_t row[kMax], pos[kMax];
  bool slot[kMax], on[kMax];  // slot: team-uniform; on: this lane has data
  const int lpr = seg.lanes_per_row;  // multi: lanes per row, rows per slot = kTeam / lpr
  const int rps = kTeam / lpr;
#pragma unroll
  for (int j = 0; j < kMax; ++j) {
    row[j] = multi ? row0 + j * rps + lane / lpr : row0;
    pos[j] = multi ? static_cast<int64_t>(lane % lpr) * N : c0 + static_cast<int64_t>(j * kTeam + lane) * N;
    slot[j] = multi ? row0 + j * rps < nrows : j < V;
    on[j] = (multi ? row[j] < nrows : slot[j]) && pos[j] < L;
  }
  float xv[kMax][N], hist[kMax][W - 1], xn[kMax][W - 1], g[kMax][N], gn[kMax][W - 1];
#pragma unroll
  for (int j = 0; j < kMax; ++j) {
    if (on[j]) {
      const S* xrow = x + row[j] * L;
      load_f<T, N>(xrow + pos[j], xv[j]);
      load_f<T, N>(dout + row[j] * L + pos[j], g[j]);
      load_left<T, N, W>(p, seg, xrow, row[j], pos[j], hist[j]);
      load_right<T, N, W>(xrow, pos[j], L, xn[j]);
      load_right<T, N, W>(dout + row[j] * L, pos[j], L, gn[j]);
    } else {
#pragma unroll
      for (int e = 0; e < N; ++e) xv[j][e] = g[j][e] = 0.0f;
#pragma unroll
      for (int i = 0; i < W - 1; ++i) hist[j][i] = xn[j][i] = gn[j][i] = 0.0f;
    }
  }
  float w[kMax][W], bias[kMax];
#pragma unroll
  for (int j = 0; j < kMax; ++j) {
    if (j == 0 || multi) {
      const int64_t d = row[j] % p.dim;
#pragma unroll
      for (int k = 0; k < W; ++k) w[j][k] = load_any(seg.in(Role::kWeight), d * W + k, p.wtype);
      bias[j] = p.has_bias ? load_any(seg.in(Role::kBias), d, p.wtype) : 0.0f;
    } else {
#pragma unroll
      for (int k = 0; k < W; ++k) w[j][k] = w[0][k];
      bias[j] = bias[0];
    }
  }
  // x̃ at pos + idx, idx in [-(W-1), N+W-1), compile-time idx.
#define XT(j, idx) ((idx) < 0 ? hist[j][(idx) < 0 ? W - 1 + (idx) : 0] \
                    : (idx) < N ? xv[j][(idx) < N && (idx) >= 0 ? (idx) : 0] \
                                : xn[j][(idx) >= N ? (idx) - N : 0])
  float dw[kMax][W + 1];  // [W] is dbias
#pragma unroll
  for (int j = 0; j < kMax; ++j) {
#pragma unroll
    for (int k = 0; k <= W; ++k) dw[j][k] = 0.0f;
    if (on[j]) {
      if (p.silu) {
#pragma unroll
        for (int e = 0; e < N + W - 1; ++e) {
          float z = bias[j];
#pragma unroll
          for (int k = 0; k < W; ++k) z += w[j][k] * XT(j, e + k - (W - 1));
          if (e < N) g[j][e < N ? e : 0] = grad_of(g[j][e < N ? e : 0], z, true);
          else gn[j][e >= N ? e - N : 0] = grad_of(gn[j][e >= N ? e - N : 0], z, true);
        }
      }
      float dxv[N];
#pragma unroll
      for (int e = 0; e < N; ++e) {
        float acc = 0.0f;
#pragma unroll
        for (int k = 0; k < W; ++k) {
          const int idx = e + (W - 1) - k;
          acc += w[j][k] * (idx < N ? g[j][idx < N ? idx : 0] : gn[j][idx >= N ? idx - N : 0]);
        }
        if (p.has_dfinal) {
          const int64_t t = pos[j] + e;
          if (t >= L - (W - 1)) {
            acc += T::to_f(static_cast<const S*>(seg.in(Role::kDfinalStates))[row[j] * (W - 1) + t - (L - (W - 1))]);
          }
        }
        dxv[e] = acc;
        dw[j][W] += g[j][e];
#pragma unroll
        for (int k = 0; k < W; ++k) dw[j][k] += g[j][e] * XT(j, e + k - (W - 1));
      }
      store_f<T, N>(static_cast<S*>(seg.out(Role::kDx)) + row[j] * L + pos[j], dxv);
      if (p.ret_dinit && pos[j] == 0) {
        S* dinit = static_cast<S*>(seg.out(Role::kDinitialStates)) + row[j] * (W - 1);
#pragma unroll
        for (int i = 0; i < W - 1; ++i) {
          float acc = 0.0f;
#pragma unroll
          for (int k = 0; k <= i; ++k) {
            const int t = i - k;  // g at position t (zero past L)
            acc += w[j][k] * (t < N ? g[j][t < N ? t : 0] : gn[j][t >= N ? t - N : 0]);
          }
          if (p.has_dfinal && i >= L) {
            acc += T::to_f(static_cast<const S*>(seg.in(Role::kDfinalStates))[row[j] * (W - 1) + i - L]);
          }
          dinit[i] = T::from_f(acc);
        }
      }
    }
  }
#undef XT

  // Partials for the fixed-order reduction (reduce_dw_kernel): one per
  // (channel, b, chunk), laid out [d][b * nchunks + chunk][W + 1].
  const int64_t nparts = B * nchunks;
  if (multi) {
#pragma unroll
    for (int j = 0; j < kMax; ++j) {
      if (slot[j]) {
        // Sum over the lpr lanes of each row (xor masks below lpr stay
        // inside the row's lane group), fixed order.
        float v[W + 1];
#pragma unroll
        for (int k = 0; k <= W; ++k) {
          v[k] = dw[j][k];
          for (int m = lpr / 2; m >= 1; m >>= 1) v[k] += gpu_shfl_xor(v[k], m, kTeam);
        }
        if (lane % lpr == 0 && row[j] < nrows) {
          const int64_t d = row[j] % p.dim, b = row[j] / p.dim;
          float* mine = p.partials + seg.ws_partial_offset + (d * nparts + b) * (W + 1);
#pragma unroll
          for (int k = 0; k <= W; ++k) mine[k] = v[k];
        }
      }
    }
  } else {
    float v[W + 1];
#pragma unroll
    for (int k = 0; k <= W; ++k) {
      float acc = 0.0f;
#pragma unroll
      for (int j = 0; j < kMax; ++j) acc += dw[j][k];
      v[k] = team_sum(acc);
    }
    if (lane == 0) {
      const int64_t d = row0 % p.dim, b = row0 / p.dim;
      float* mine = p.partials + seg.ws_partial_offset + (d * nparts + b * nchunks + chunk) * (W + 1);
#pragma unroll
      for (int k = 0; k <= W; ++k) mine[k] = v[k];
    }
  }
}

// Vector path (N >= W-1): as bwd_cf_team_loads, but the left x halo comes
// from the previous lane and the right g halo (g at pos+N .. pos+N+W-2)
// from the next lane by shuffle, so g is computed once per element. Only
// the lane ending a chunk computes its W-1 right-halo g values itself.
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
  constexpr int kMax = detail::MaxPerLaneBwd(sizeof(typename T::S));
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
        float acc = 0.0f;
#pragma unroll
        for (int k = 0; k < W; ++k) {
          const int idx = e + kH - k;
          acc += wj[j][k] * (idx < N ? g[j][idx < N ? idx : 0] : gn[idx >= N ? idx - N : 0]);
        }
        if (!kFullTile && p.has_dfinal) {
          const int64_t t = pos + e;
          if (t >= L - kH) acc += T::to_f(dfin[r * kH + t - (L - kH)]);
        }
        dxv[e] = acc;
        // Full tiles sum straight into the tile's total.
        float* dwt = kFullTile ? dw : dws;
        dwt[W] += g[j][e];
#pragma unroll
        for (int k = 0; k < W; ++k) dwt[k] += g[j][e] * xf[j][e + k];
      }
      store_f<T, N>(static_cast<S*>(seg.out(Role::kDx)) + base + j * jstride, dxv);
      if (!kFullTile && p.ret_dinit && pos == 0) {
        S* dinit = static_cast<S*>(seg.out(Role::kDinitialStates)) + r * kH;
#pragma unroll
        for (int i = 0; i < kH; ++i) {
          float acc = 0.0f;
#pragma unroll
          for (int k = 0; k <= i; ++k) {
            const int t = i - k;  // g at position t (zero past L)
            acc += wj[j][k] * (t < N ? g[j][t < N ? t : 0] : gn[t >= N ? t - N : 0]);
          }
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

template <bool B>
struct BoolTag {
  static constexpr bool value = B;
};

// Long rows of 16-bit elements on the vector path (is_stream_tile): a team
// owns one chunk of a row, per_lane steps of kTeam vectors of N = 8 elements
// (lane l holds elements l*N .. l*N+N-1 of a step), and walks the steps in
// order. x and dout of the next kP steps are in flight while it computes the
// current one: each lane copies its vectors asynchronously into its own
// slots of the team's ring `stage` (kP + 1 slots, so the slot being filled
// was read a step earlier), which keeps them out of registers. Per step:
//  - left x̃ halo of a lane: the previous lane's tail by shuffle; lane 0
//    gets lane 31's tail of the previous step (lane 31 carries it; before
//    step 0 it holds the chunk's left halo, loaded directly);
//  - g once per element; dweight/dbias summed per lane over the whole chunk
//    (one team sum at the end, a partial per (row, chunk) as elsewhere);
//  - dx of step s-1, now that g of step s is known: its right g halo comes
//    from the next lane, lane 31's from lane 0 of step s.
// After the last step, lane 31 computes the chunk's right g halo itself
// from the x and dout vector just past the chunk (zero past L), which it
// copies in the slot a step after the last would have used.
// Only the row's last step can be partial (L % N == 0): its lanes at or past
// L get zeros (dout = 0, so g = 0 for finite x̃) and store nothing.
template <class T, int W, bool kSilu>
__device__ __forceinline__ void bwd_cf_stream_team(const KParams& p, const Conv1dSegment& seg,
                                                   int64_t local, int lane,
                                                   uint4 (*stage)[2][kTeam]) {
  using S = typename T::S;
  constexpr int N = kVecElts<T>;
  constexpr int kH = W - 1;
  constexpr int kStep = kTeam * N;
  constexpr int kP = detail::kBwdStreamPrefetch;
  constexpr int kSlots = kP + 1;
  static_assert(N == 8, "one 16-byte vector per lane and step");
  static_assert(N > kH, "a lane's tail must hold the whole halo");
  static_assert(kP >= 1, "at least one step in flight");
  const int64_t L = seg.seqlen;
  const int64_t nchunks = seg.nchunks;
  const int V = seg.per_lane;
  const int64_t row = div_fast(local, nchunks);
  const int64_t chunk = local - row * nchunks;
  const int64_t c0 = chunk * V * kStep;
  const int64_t rem = L - c0;
  const int nsteps = rem >= static_cast<int64_t>(V) * kStep ? V : static_cast<int>((rem + kStep - 1) / kStep);
  const int64_t cend = c0 + static_cast<int64_t>(nsteps) * kStep;
  const bool partial = cend > L;  // the row's last step, partial
  const bool more = cend < L;     // the row goes on past the chunk
  const bool first = lane == 0;
  const bool last = lane == kTeam - 1;
  const int src_prev = (lane + kTeam - 1) & (kTeam - 1);
  const int src_next = (lane + 1) & (kTeam - 1);
  const int64_t lpos = c0 + lane * N;  // this lane's position in step 0
  // Steps in which this lane lies inside the row.
  const int lsteps = !partial ? nsteps : lpos >= L ? 0 : static_cast<int>((L - lpos + kStep - 1) / kStep);
  const S* xp = static_cast<const S*>(seg.in(Role::kX)) + row * L + lpos;
  const S* dp = static_cast<const S*>(seg.in(Role::kDout)) + row * L + lpos;
  S* dxp = static_cast<S*>(seg.out(Role::kDx)) + row * L + lpos;

  // Step st's vectors into slot `slot` (st < nsteps), or for st == nsteps
  // lane 31's vectors just past the chunk (when inside the row); zeros
  // where there is nothing to read. One group per call.
  auto issue = [&](int st, int slot) {
    const bool tail = st == nsteps && last && more;
    const bool ok = st < nsteps ? !partial || st < lsteps : tail;
    const int64_t off = ok ? static_cast<int64_t>(st) * kStep - (tail ? (kTeam - 1) * N : 0) : 0;
    copy16_async(&stage[slot][0][lane], xp + off, ok ? 16 : 0);
    copy16_async(&stage[slot][1][lane], dp + off, ok ? 16 : 0);
    copy_async_commit();
  };
#pragma unroll
  for (int q = 0; q < kP; ++q) issue(q, q);
  int rd = 0, wr = kP;  // slots of the step to compute and of the next issue
  float carry[kH];      // lane 31: x̃ left of the next step (at first, of the chunk)
#pragma unroll
  for (int i = 0; i < kH; ++i) carry[i] = 0.0f;
  if (last) load_left<T, N, W>(p, seg, static_cast<const S*>(seg.in(Role::kX)) + row * L, row, c0, carry);
  float w[W], bias = 0.0f;
  {
    const int64_t d = mod_fast(row, p.dim);
#pragma unroll
    for (int k = 0; k < W; ++k) w[k] = load_any(seg.in(Role::kWeight), d * W + k, p.wtype);
    if (p.has_bias) bias = load_any(seg.in(Role::kBias), d, p.wtype);
  }

  float dw[W + 1];  // [W] is dbias
#pragma unroll
  for (int k = 0; k <= W; ++k) dw[k] = 0.0f;
  float gc[N];  // g of the previous step
  // dx of the previous step from gc and its right halo gh.
  auto dx_of = [&](const float (&gh)[kH], float (&dxv)[N]) {
#pragma unroll
    for (int e = 0; e < N; ++e) {
      float acc = 0.0f;
#pragma unroll
      for (int k = 0; k < W; ++k) {
        const int idx = e + kH - k;
        acc += w[k] * (idx < N ? gc[idx < N ? idx : 0] : gh[idx >= N ? idx - N : 0]);
      }
      dxv[e] = acc;
    }
  };
  auto step = [&](auto first_step, int st) {
    constexpr bool kFirstStep = decltype(first_step)::value;
    copy_async_wait<kP - 1>();  // step st's group has landed
    const uint4 xb = stage[rd][0][lane];
    const uint4 db = stage[rd][1][lane];
    issue(st + kP, wr);
    rd = rd + 1 == kSlots ? 0 : rd + 1;
    wr = wr + 1 == kSlots ? 0 : wr + 1;
    float xf[kH + N];  // x̃ at pos-(W-1) .. pos+N-1
    float dv[N];
    {
      float xv[N];
      unpack_words<T>(xb, xv);
#pragma unroll
      for (int e = 0; e < N; ++e) xf[kH + e] = xv[e];
    }
    unpack_words<T>(db, dv);
#pragma unroll
    for (int i = 0; i < kH; ++i) {
      const float give = last ? carry[i] : xf[N + i];
      xf[i] = gpu_shfl(give, src_prev, kTeam);
      carry[i] = xf[N + i];
    }
    float gs[N];
#pragma unroll
    for (int e = 0; e < N; ++e) {
      float gv = dv[e];
      if constexpr (kSilu) {
        float z = bias;
#pragma unroll
        for (int k = 0; k < W; ++k) z += w[k] * xf[e + k];
        gv = silu_backward_f(dv[e], z);
      }
      gs[e] = gv;
      dw[W] += gv;
#pragma unroll
      for (int k = 0; k < W; ++k) dw[k] += gv * xf[e + k];
    }
    if constexpr (kFirstStep) {
      if (p.ret_dinit && chunk == 0 && first) {
        // L > kTeam * N here, so dfinal_states never reaches dinitial_states.
        S* dinit = static_cast<S*>(seg.out(Role::kDinitialStates)) + row * kH;
#pragma unroll
        for (int i = 0; i < kH; ++i) {
          float acc = 0.0f;
#pragma unroll
          for (int k = 0; k <= i; ++k) acc += w[k] * gs[i - k];
          dinit[i] = T::from_f(acc);
        }
      }
    } else {
      // Step st-1 is full and not the row's last: no range checks, no dfinal.
      float gh[kH];
#pragma unroll
      for (int i = 0; i < kH; ++i) gh[i] = gpu_shfl(first ? gs[i] : gc[i], src_next, kTeam);
      float dxv[N];
      dx_of(gh, dxv);
      store_words(dxp + static_cast<int64_t>(st - 1) * kStep, pack_words<T>(dxv));
    }
#pragma unroll
    for (int e = 0; e < N; ++e) gc[e] = gs[e];
  };
  step(BoolTag<true>{}, 0);
  // Two steps per iteration, so that g of the previous step needs no
  // register copy at the loop edge.
#pragma unroll 1
  for (int s0 = 1; s0 < nsteps; s0 += 2) {
    step(BoolTag<false>{}, s0);
    if (s0 + 1 < nsteps) step(BoolTag<false>{}, s0 + 1);
  }
  {
    // The last step; lane 31's right halo is g just past the chunk.
    copy_async_wait<kP - 1>();  // the tail group has landed
    float gh[kH];
#pragma unroll
    for (int i = 0; i < kH; ++i) gh[i] = gpu_shfl(gc[i], src_next, kTeam);
    if (last) {
      float xn[N], dn[N];
      unpack_words<T>(stage[rd][0][lane], xn);
      unpack_words<T>(stage[rd][1][lane], dn);
#pragma unroll
      for (int i = 0; i < kH; ++i) {
        float gv = dn[i];
        if constexpr (kSilu) {
          float z = bias;
#pragma unroll
          for (int k = 0; k < W; ++k) {
            const int idx = i + k;  // x̃ at cend - kH + idx
            z += w[k] * (idx < kH ? carry[idx < kH ? idx : 0] : xn[idx >= kH ? idx - kH : 0]);
          }
          gv = silu_backward_f(dn[i], z);
        }
        gh[i] = more ? gv : 0.0f;
      }
    }
    if (nsteps <= lsteps) {
      const int64_t pos = lpos + static_cast<int64_t>(nsteps - 1) * kStep;
      float dxv[N];
      dx_of(gh, dxv);
      if (p.has_dfinal && pos + N == L) {
        const S* dfin = static_cast<const S*>(seg.in(Role::kDfinalStates)) + row * kH;
#pragma unroll
        for (int i = 0; i < kH; ++i) dxv[N - kH + i] += T::to_f(dfin[i]);
      }
      store_words(dxp + static_cast<int64_t>(nsteps - 1) * kStep, pack_words<T>(dxv));
    }
  }
  copy_async_wait<0>();  // the ring is free for the team's next tile
  float v[W + 1];
#pragma unroll
  for (int k = 0; k <= W; ++k) v[k] = team_sum(dw[k]);
  if (first) {
    const int64_t d = mod_fast(row, p.dim), b = div_fast(row, p.dim);
    float* mine = p.partials + seg.ws_partial_offset +
                  (d * (seg.batch * nchunks) + b * nchunks + chunk) * (W + 1);
#pragma unroll
    for (int k = 0; k <= W; ++k) mine[k] = v[k];
  }
}

// A walked stream segment (ws_partial_offset < 0; the planner: whole rows,
// and the B rows of a channel together at most kBwdWalkSteps steps): the
// team of tile d walks rows d, D+d, .. (B-1)*D+d one after the other, the ring
// running on across the row boundaries, and stores the channel's dweight
// and dbias itself (no partials, no reduce_dw_kernel). Within a row the
// steps are those of bwd_cf_stream_team with the chunk being the whole row
// (no tail group: g past the row is zero). dweight/dbias: per lane over all
// steps of all rows in order, then one team sum; 0 + sum as reduce_dw_kernel
// would store a single partial.
template <class T, int W, bool kSilu>
__device__ __forceinline__ void bwd_cf_stream_walk(const KParams& p, const Conv1dSegment& seg,
                                                   int64_t d, int lane, uint4 (*stage)[2][kTeam]) {
  using S = typename T::S;
  constexpr int N = kVecElts<T>;
  constexpr int kH = W - 1;
  constexpr int kStep = kTeam * N;
  constexpr int kP = detail::kBwdStreamPrefetch;
  constexpr int kSlots = kP + 1;
  static_assert(N == 8, "one 16-byte vector per lane and step");
  static_assert(N > kH, "a lane's tail must hold the whole halo");
  const int64_t L = seg.seqlen;
  const int64_t B = seg.batch;
  const int64_t rstride = p.dim * L;  // between the rows of one channel
  const int nsteps = static_cast<int>((L + kStep - 1) / kStep);
  const bool partial = static_cast<int64_t>(nsteps) * kStep > L;
  const bool first = lane == 0;
  const bool last = lane == kTeam - 1;
  const int src_prev = (lane + kTeam - 1) & (kTeam - 1);
  const int src_next = (lane + 1) & (kTeam - 1);
  const int64_t lpos = lane * N;
  const int lsteps = !partial ? nsteps : lpos >= L ? 0 : static_cast<int>((L - lpos + kStep - 1) / kStep);
  const S* xp = static_cast<const S*>(seg.in(Role::kX)) + d * L + lpos;
  const S* dp = static_cast<const S*>(seg.in(Role::kDout)) + d * L + lpos;
  S* dxp = static_cast<S*>(seg.out(Role::kDx)) + d * L + lpos;

  // The next step to issue: row ib, step ist (zeros once past the last row
  // or, in a partial last step, past L). One group per call.
  int64_t ib = 0, ioff = 0;  // ioff = ib * rstride
  int ist = 0;
  auto issue = [&](int slot) {
    const bool ok = ib < B && ist < lsteps;
    const int64_t off = ok ? ioff + static_cast<int64_t>(ist) * kStep : 0;
    copy16_async(&stage[slot][0][lane], xp + off, ok ? 16 : 0);
    copy16_async(&stage[slot][1][lane], dp + off, ok ? 16 : 0);
    copy_async_commit();
    if (++ist == nsteps) {
      ist = 0;
      ++ib;
      ioff += rstride;
    }
  };
#pragma unroll
  for (int q = 0; q < kP; ++q) issue(q);
  int rd = 0, wr = kP;
  float w[W], bias = 0.0f;
#pragma unroll
  for (int k = 0; k < W; ++k) w[k] = load_any(seg.in(Role::kWeight), d * W + k, p.wtype);
  if (p.has_bias) bias = load_any(seg.in(Role::kBias), d, p.wtype);

  float dw[W + 1];  // [W] is dbias
#pragma unroll
  for (int k = 0; k <= W; ++k) dw[k] = 0.0f;
  float carry[kH];  // lane 31: x̃ left of the next step
  float gc[N];      // g of the previous step
  auto dx_of = [&](const float (&gh)[kH], float (&dxv)[N]) {
#pragma unroll
    for (int e = 0; e < N; ++e) {
      float acc = 0.0f;
#pragma unroll
      for (int k = 0; k < W; ++k) {
        const int idx = e + kH - k;
        acc += w[k] * (idx < N ? gc[idx < N ? idx : 0] : gh[idx >= N ? idx - N : 0]);
      }
      dxv[e] = acc;
    }
  };
  int64_t row = d;
  S* dxr = dxp;  // this row's dx
  auto step = [&](auto first_step, int st) {
    constexpr bool kFirstStep = decltype(first_step)::value;
    copy_async_wait<kP - 1>();  // this step's group has landed
    const uint4 xb = stage[rd][0][lane];
    const uint4 db = stage[rd][1][lane];
    issue(wr);
    rd = rd + 1 == kSlots ? 0 : rd + 1;
    wr = wr + 1 == kSlots ? 0 : wr + 1;
    float xf[kH + N];  // x̃ at pos-(W-1) .. pos+N-1
    float dv[N];
    {
      float xv[N];
      unpack_words<T>(xb, xv);
#pragma unroll
      for (int e = 0; e < N; ++e) xf[kH + e] = xv[e];
    }
    unpack_words<T>(db, dv);
#pragma unroll
    for (int i = 0; i < kH; ++i) {
      const float give = last ? carry[i] : xf[N + i];
      xf[i] = gpu_shfl(give, src_prev, kTeam);
      carry[i] = xf[N + i];
    }
    float gs[N];
#pragma unroll
    for (int e = 0; e < N; ++e) {
      float gv = dv[e];
      if constexpr (kSilu) {
        float z = bias;
#pragma unroll
        for (int k = 0; k < W; ++k) z += w[k] * xf[e + k];
        gv = silu_backward_f(dv[e], z);
      }
      gs[e] = gv;
      dw[W] += gv;
#pragma unroll
      for (int k = 0; k < W; ++k) dw[k] += gv * xf[e + k];
    }
    if constexpr (kFirstStep) {
      if (p.ret_dinit && first) {
        // L > kTeam * N (stream rows), so dfinal_states never reaches here.
        S* dinit = static_cast<S*>(seg.out(Role::kDinitialStates)) + row * kH;
#pragma unroll
        for (int i = 0; i < kH; ++i) {
          float acc = 0.0f;
#pragma unroll
          for (int k = 0; k <= i; ++k) acc += w[k] * gs[i - k];
          dinit[i] = T::from_f(acc);
        }
      }
    } else {
      // Step st-1 is full and not the row's last: no range checks, no dfinal.
      float gh[kH];
#pragma unroll
      for (int i = 0; i < kH; ++i) gh[i] = gpu_shfl(first ? gs[i] : gc[i], src_next, kTeam);
      float dxv[N];
      dx_of(gh, dxv);
      store_words(dxr + static_cast<int64_t>(st - 1) * kStep, pack_words<T>(dxv));
    }
#pragma unroll
    for (int e = 0; e < N; ++e) gc[e] = gs[e];
  };
#pragma unroll 1
  for (int64_t b = 0; b < B; ++b) {
#pragma unroll
    for (int i = 0; i < kH; ++i) carry[i] = 0.0f;
    if (last && p.has_init) {
      load_left<T, N, W>(p, seg, static_cast<const S*>(seg.in(Role::kX)) + row * L, row, 0, carry);
    }
    step(BoolTag<true>{}, 0);
#pragma unroll 1
    for (int s0 = 1; s0 < nsteps; s0 += 2) {
      step(BoolTag<false>{}, s0);
      if (s0 + 1 < nsteps) step(BoolTag<false>{}, s0 + 1);
    }
    // The row's last step: g past the row is zero.
    float gh[kH];
#pragma unroll
    for (int i = 0; i < kH; ++i) {
      gh[i] = gpu_shfl(gc[i], src_next, kTeam);
      if (last) gh[i] = 0.0f;
    }
    if (nsteps <= lsteps) {
      const int64_t pos = lpos + static_cast<int64_t>(nsteps - 1) * kStep;
      float dxv[N];
      dx_of(gh, dxv);
      if (p.has_dfinal && pos + N == L) {
        const S* dfin = static_cast<const S*>(seg.in(Role::kDfinalStates)) + row * kH;
#pragma unroll
        for (int i = 0; i < kH; ++i) dxv[N - kH + i] += T::to_f(dfin[i]);
      }
      store_words(dxr + static_cast<int64_t>(nsteps - 1) * kStep, pack_words<T>(dxv));
    }
    row += p.dim;
    dxr += rstride;
  }
  copy_async_wait<0>();  // the ring is free for the team's next tile
  float v[W + 1];
#pragma unroll
  for (int k = 0; k <= W; ++k) v[k] = team_sum(dw[k]);
  if (first) {
#pragma unroll
    for (int k = 0; k < W; ++k) store_any(seg.out(Role::kDweight), d * W + k, p.gwtype, 0.0f + v[k]);
    if (p.has_bias) store_any(seg.out(Role::kDbias), d, p.gwtype, 0.0f + v[W]);
  }
}

// One level of a reduce-scatter between lane pairs (lane ^ m) of nin
// values: the lane whose bit is 0 keeps the sums of values 0 .. nout-1, its
// partner those of nout .. nin-1 (zeros past nin). nin == nout (one value):
// a plain butterfly step.
template <int kIn, int kOut>
__device__ __forceinline__ void scatter_level(const float (&in)[kIn], float (&out)[kOut], int bit, int m) {
  static_assert(kOut == (kIn + 1) / 2 || (kIn == 1 && kOut == 1), "halves");
  if constexpr (kIn == 1) {
    out[0] = in[0] + gpu_shfl_xor(in[0], m, kTeam);
  } else {
#pragma unroll
    for (int i = 0; i < kOut; ++i) {
      const float lo = in[i];
      const float hi = kOut + i < kIn ? in[kOut + i < kIn ? kOut + i : 0] : 0.0f;
      const float got = gpu_shfl_xor(bit ? lo : hi, m, kTeam);
      out[i] = (bit ? hi : lo) + got;
    }
  }
}

// Short rows on the vector path (rows_per_tile > 1; planner: a row fits in
// lanes_per_row lanes of one 16-byte vector each, lpr a power of two): a
// team owns rows_per_tile (<= kTeam) consecutive rows of one segment and
// walks them kTeam / lpr rows at a time (a step: lane l holds elements
// (l % lpr) * N .. + N - 1 of row l / lpr of the step), as
// bwd_cf_stream_team walks a long row: x and dout of the next kP steps are
// in flight while a step computes, copied asynchronously into the team's
// ring `stage` (kP + 1 slots). The weights, bias and states of the tile's
// rows are loaded once, lane l holding row l's, and fetched per step by
// shuffle. Per step: left x̃ halo from the previous lane (the initial state
// for a row's first lane), g once per element, right g halo from the next
// lane (zero past L), dx, and each row's dweight/dbias summed over its lpr
// lanes (a fixed-order reduce-scatter, below), stored by the lanes that end
// with them: the channel's value itself when B == 1 (ws_partial_offset < 0),
// else its partial for reduce_dw_kernel. Lanes past L or past the tile's
// rows read zeros (g = 0) and store nothing. Results do not depend on how
// rows are grouped in tiles.
template <class T, int W>
__device__ __forceinline__ void bwd_cf_rows_team(const KParams& p, const Conv1dSegment& seg,
                                                 int64_t local, int lane,
                                                 uint4 (*stage)[2][kTeam]) {
  using S = typename T::S;
  constexpr int N = kVecElts<T>;
  constexpr int kH = W - 1;
  constexpr int kP = detail::kBwdShortPrefetch;
  constexpr int kSlots = kP + 1;
  static_assert(N > kH, "a lane's tail must hold the whole halo");
  const int64_t L = seg.seqlen;
  const int64_t nrows = seg.batch * p.dim;
  const int lpr = seg.lanes_per_row;
  const int rps = kTeam / lpr;  // rows per step
  const int64_t row_begin = local * seg.rows_per_tile;
  const int64_t left = nrows - row_begin;
  const int nrt = left < seg.rows_per_tile ? static_cast<int>(left) : seg.rows_per_tile;
  const int nsteps = (nrt + rps - 1) / rps;
  const int sub = lane / lpr;  // row of the step
  const int pos = (lane & (lpr - 1)) * N;
  const bool first = pos == 0;
  const bool inrow = pos < L;
  const int src_prev = (lane + kTeam - 1) & (kTeam - 1);
  const int src_next = (lane + 1) & (kTeam - 1);
  const int64_t lane_off = (row_begin + sub) * L + pos;
  const int64_t step_off = static_cast<int64_t>(rps) * L;
  const S* xp = static_cast<const S*>(seg.in(Role::kX)) + lane_off;
  const S* dp = static_cast<const S*>(seg.in(Role::kDout)) + lane_off;
  S* dxp = static_cast<S*>(seg.out(Role::kDx)) + lane_off;
  // Read once: the loop's stores could alias the segment table as far as
  // the compiler knows, which would reload these after every store.
  void* const dweight = seg.out(Role::kDweight);
  void* const dbias = seg.out(Role::kDbias);
  S* const dinit0 = static_cast<S*>(seg.out(Role::kDinitialStates));
  const int64_t ws_off = seg.ws_partial_offset;
  const int64_t seg_batch = seg.batch;

  // Step st's vectors into slot `slot` (nothing past the tile's steps, an
  // empty group). One group per call.
  auto issue = [&](int st, int slot) {
    if (st < nsteps) {
      const bool ok = inrow && st * rps + sub < nrt;
      const int64_t off = ok ? st * step_off : 0;
      copy16_async(&stage[slot][0][lane], xp + off, ok ? 16 : 0);
      copy16_async(&stage[slot][1][lane], dp + off, ok ? 16 : 0);
    }
    copy_async_commit();
  };
#pragma unroll
  for (int q = 0; q < kP; ++q) issue(q, q);
  int rd = 0, wr = kP;  // slots of the step to compute and of the next issue

  // Lane l: weights, bias and states of the tile's row l.
  float wl[W], bl = 0.0f, il[kH], fl[kH];
#pragma unroll
  for (int k = 0; k < W; ++k) wl[k] = 0.0f;
#pragma unroll
  for (int i = 0; i < kH; ++i) il[i] = fl[i] = 0.0f;
  if (lane < nrt) {
    const int64_t r = row_begin + lane;
    const int64_t d = mod_fast(r, p.dim);
#pragma unroll
    for (int k = 0; k < W; ++k) wl[k] = load_any(seg.in(Role::kWeight), d * W + k, p.wtype);
    if (p.has_bias) bl = load_any(seg.in(Role::kBias), d, p.wtype);
    if (p.has_init) {
      const S* init = static_cast<const S*>(seg.in(Role::kInitialStates)) + r * kH;
#pragma unroll
      for (int i = 0; i < kH; ++i) il[i] = T::to_f(init[i]);
    }
    if (p.has_dfinal) {
      const S* dfin = static_cast<const S*>(seg.in(Role::kDfinalStates)) + r * kH;
#pragma unroll
      for (int i = 0; i < kH; ++i) fl[i] = T::to_f(dfin[i]);
    }
  }

#pragma unroll 1
  for (int st = 0; st < nsteps; ++st) {
    copy_async_wait<kP - 1>();  // step st's group has landed
    const uint4 xb = stage[rd][0][lane];
    const uint4 db = stage[rd][1][lane];
    issue(st + kP, wr);
    rd = rd + 1 == kSlots ? 0 : rd + 1;
    wr = wr + 1 == kSlots ? 0 : wr + 1;
    const int rs = st * rps + sub;  // row of the tile, and the lane holding its weights
    const bool ok = inrow && rs < nrt;
    float w[W], bias;
#pragma unroll
    for (int k = 0; k < W; ++k) w[k] = gpu_shfl(wl[k], rs, kTeam);
    bias = gpu_shfl(bl, rs, kTeam);
    float xf[kH + N];  // x̃ at pos-(W-1) .. pos+N-1
    float dv[N];
    {
      S xs[N], ds[N];
      __builtin_memcpy(xs, &xb, 16);
      __builtin_memcpy(ds, &db, 16);
      float xv[N];
      unpack_f<T, N>(xs, xv);
      unpack_f<T, N>(ds, dv);
#pragma unroll
      for (int e = 0; e < N; ++e) xf[kH + e] = xv[e];
    }
#pragma unroll
    for (int i = 0; i < kH; ++i) {
      const float got = gpu_shfl(xf[N + i], src_prev, kTeam);
      float own = 0.0f;
      if (p.has_init) own = gpu_shfl(il[i], rs, kTeam);
      xf[i] = first ? own : got;
    }
    float g[N];
#pragma unroll
    for (int e = 0; e < N; ++e) {
      if (p.silu) {
        float z = bias;
#pragma unroll
        for (int k = 0; k < W; ++k) z += w[k] * xf[e + k];
        g[e] = silu_backward_f(dv[e], z);
      } else {
        g[e] = dv[e];
      }
    }
    float gn[kH];  // g at pos+N .. pos+N+W-2, zero past L
#pragma unroll
    for (int i = 0; i < kH; ++i) {
      const float got = gpu_shfl(g[i], src_next, kTeam);
      gn[i] = pos + N + i < L ? got : 0.0f;
    }
    float fv[kH];
#pragma unroll
    for (int i = 0; i < kH; ++i) fv[i] = 0.0f;
    if (p.has_dfinal) {
#pragma unroll
      for (int i = 0; i < kH; ++i) fv[i] = gpu_shfl(fl[i], rs, kTeam);
    }
    float dws[W + 1];  // [W] is dbias
#pragma unroll
    for (int k = 0; k <= W; ++k) dws[k] = 0.0f;
    float dxv[N];
#pragma unroll
    for (int e = 0; e < N; ++e) {
      float acc = 0.0f;
#pragma unroll
      for (int k = 0; k < W; ++k) {
        const int idx = e + kH - k;
        acc += w[k] * (idx < N ? g[idx < N ? idx : 0] : gn[idx >= N ? idx - N : 0]);
      }
      if (p.has_dfinal) {
        // dfinal_states[i] adds to dx at L - (W-1) + i (L >= N > W-1).
#pragma unroll
        for (int i = 0; i < kH; ++i) {
          if (pos + e == L - kH + i) acc += fv[i];
        }
      }
      dxv[e] = acc;
      dws[W] += g[e];
#pragma unroll
      for (int k = 0; k < W; ++k) dws[k] += g[e] * xf[e + k];
    }
    const int64_t r = row_begin + rs;
    if (ok) store_f<T, N>(dxp + st * step_off, dxv);
    if (p.ret_dinit && first && ok) {
      // x̃ positions 0 .. W-2 before x; g at t < W-1 < N is this lane's.
      S* dinit = dinit0 + r * kH;
#pragma unroll
      for (int i = 0; i < kH; ++i) {
        float acc = 0.0f;
#pragma unroll
        for (int k = 0; k <= i; ++k) acc += w[k] * g[i - k];
        dinit[i] = T::from_f(acc);
      }
    }
    // The row's W + 1 sums over its lpr lanes (xor masks below lpr stay
    // inside the row's lane group), in a fixed order. A reduce-scatter:
    // at masks 1, 2 and 4 each lane pair splits the values it holds, so a
    // lane ends with one (lpr = 4: up to two) of them, chosen by its low
    // lane bits; plain butterflies over the higher masks do the rest, and
    // the first 8 lanes of the row store.
    constexpr int kN1 = (W + 2) / 2;    // values held after mask 1
    constexpr int kN2 = (kN1 + 1) / 2;  // after mask 2
    const int b0 = lane & 1, b1 = (lane >> 1) & 1, b2 = (lane >> 2) & 1;
    float h1[kN1], h2[kN2], h3[1];
    scatter_level<W + 1, kN1>(dws, h1, b0, 1);
    scatter_level<kN1, kN2>(h1, h2, b1, 2);
    const int kb = b0 ? kN1 : 0;              // h1[j] holds sum kb + j ..
    const int cnt = b0 ? W + 1 - kN1 : kN1;  // .. for j < cnt (zeros after)
    int j = b1 ? kN2 : 0;                     // h2[i] is h1[j + i]
    const int64_t d = mod_fast(r, p.dim);
    const bool rowv = rs < nrt && (lane & (lpr - 1)) < 8;
    const int64_t b = ws_off < 0 ? 0 : div_fast(r, p.dim);
    // Stores h1 slot jj of the row (sum k < W: dweight, k == W: dbias).
    auto put = [&](int jj, float v) {
      if (!rowv || jj >= cnt) return;
      const int k = kb + jj;
      if (ws_off < 0) {
        // B = 1 (planner): the channel's whole sum.
        if (k < W) store_any(dweight, d * W + k, p.gwtype, v);
        else if (p.has_bias) store_any(dbias, d, p.gwtype, v);
      } else {
        p.partials[ws_off + (d * seg_batch + b) * (W + 1) + k] = v;
      }
    };
    if (lpr == 4) {
#pragma unroll
      for (int i = 0; i < kN2; ++i) put(j + i, h2[i]);
    } else {
      scatter_level<kN2, 1>(h2, h3, b2, 4);
      if (kN2 > 1 && b2) j += 1;
#pragma unroll
      for (int m = 8; m < kTeam; m <<= 1) {
        if (m < lpr) h3[0] += gpu_shfl_xor(h3[0], m, kTeam);
      }
      put(j, h3[0]);
    }
  }
  copy_async_wait<0>();  // the ring is free for the team's next tile
}

// Short rows on the vector path where BwdShortPersist (fp16/bf16 by
// default; bwd_cf_short_kernel): as bwd_cf_rows_team, but a team walks nrt consecutive rows of one segment
// from row_begin (a run of whole tiles), kTeam / lpr rows at a time (a step:
// lane l holds elements (l % lpr) * N .. + N - 1 of row l / lpr of the
// step), as bwd_cf_stream_team walks a long row: x and dout of the next kP
// steps are in flight while a step computes, copied asynchronously into the
// team's ring `stage` (kP + 1 slots), across the whole run. The rows come in
// groups of kTeam (lpr steps): at a group's first step lane l loads the
// weights, bias and states of the group's row l, fetched per step by
// shuffle. Per step: left x̃ halo from the previous lane (the initial state
// for a row's first lane), g once per element, right g halo from the next
// lane (zero past L), dx, and each row's dweight/dbias summed over its lpr
// lanes (a fixed-order reduce-scatter, below), stored by the lanes that end
// with them: the channel's value itself when B == 1 (ws_partial_offset < 0),
// else its partial for reduce_dw_kernel. Lanes past L or past the run's
// rows read zeros (g = 0) and store nothing. Results do not depend on how
// rows are grouped in tiles, runs or steps.
template <class T, int W, bool kSilu>
__device__ __forceinline__ void bwd_cf_run_team(const KParams& p, const Conv1dSegment& seg,
                                                 int64_t row_begin, int nrt, int lane,
                                                 uint4 (*stage)[2][kTeam]) {
  using S = typename T::S;
  constexpr int N = kVecElts<T>;
  constexpr int kH = W - 1;
  constexpr int kP = detail::kBwdShortPrefetch;
  constexpr int kSlots = kP + 1;
  static_assert(N > kH, "a lane's tail must hold the whole halo");
  const int64_t L = seg.seqlen;
  const int lpr = seg.lanes_per_row;
  const int rps = kTeam / lpr;  // rows per step
  const int nsteps = (nrt + rps - 1) / rps;
  const int sub = lane / lpr;  // row of the step
  const int pos = (lane & (lpr - 1)) * N;
  const bool first = pos == 0;
  const bool inrow = pos < L;
  const int src_prev = (lane + kTeam - 1) & (kTeam - 1);
  const int src_next = (lane + 1) & (kTeam - 1);
  const int64_t lane_off = (row_begin + sub) * L + pos;
  const int64_t step_off = static_cast<int64_t>(rps) * L;
  const S* xp = static_cast<const S*>(seg.in(Role::kX)) + lane_off;
  const S* dp = static_cast<const S*>(seg.in(Role::kDout)) + lane_off;
  S* dxp = static_cast<S*>(seg.out(Role::kDx)) + lane_off;
  // Read once: the loop's stores could alias the segment table as far as
  // the compiler knows, which would reload these after every store.
  void* const dweight = seg.out(Role::kDweight);
  void* const dbias = seg.out(Role::kDbias);
  S* const dinit0 = static_cast<S*>(seg.out(Role::kDinitialStates));
  const int64_t ws_off = seg.ws_partial_offset;
  const int64_t seg_batch = seg.batch;

  // Step st's vectors into slot `slot` (nothing past the run's steps, an
  // empty group). One group per call.
  auto issue = [&](int st, int slot) {
    if (st < nsteps) {
      const bool ok = inrow && st * rps + sub < nrt;
      const int64_t off = ok ? st * step_off : 0;
      copy16_async(&stage[slot][0][lane], xp + off, ok ? 16 : 0);
      copy16_async(&stage[slot][1][lane], dp + off, ok ? 16 : 0);
    }
    copy_async_commit();
  };
#pragma unroll
  for (int q = 0; q < kP; ++q) issue(q, q);
  int rd = 0, wr = kP;  // slots of the step to compute and of the next issue

  // Lane l: weights, bias and states of the current group's row l.
  float wl[W], bl = 0.0f, il[kH], fl[kH];

#pragma unroll 1
  for (int st = 0; st < nsteps; ++st) {
    if ((st & (lpr - 1)) == 0) {
      const int g0 = st * rps;  // the group's first row in the run
#pragma unroll
      for (int k = 0; k < W; ++k) wl[k] = 0.0f;
      bl = 0.0f;
#pragma unroll
      for (int i = 0; i < kH; ++i) il[i] = fl[i] = 0.0f;
      if (g0 + lane < nrt) {
        const int64_t r = row_begin + g0 + lane;
        const int64_t d = mod_fast(r, p.dim);
#pragma unroll
        for (int k = 0; k < W; ++k) wl[k] = load_any(seg.in(Role::kWeight), d * W + k, p.wtype);
        if (p.has_bias) bl = load_any(seg.in(Role::kBias), d, p.wtype);
        if (p.has_init) {
#pragma unroll
          for (int i = 0; i < kH; ++i) il[i] = T::to_f(static_cast<const S*>(seg.in(Role::kInitialStates))[r * kH + i]);
        }
        if (p.has_dfinal) {
#pragma unroll
          for (int i = 0; i < kH; ++i) fl[i] = T::to_f(static_cast<const S*>(seg.in(Role::kDfinalStates))[r * kH + i]);
        }
      }
    }
    copy_async_wait<kP - 1>();  // step st's group has landed
    const uint4 xb = stage[rd][0][lane];
    const uint4 db = stage[rd][1][lane];
    issue(st + kP, wr);
    rd = rd + 1 == kSlots ? 0 : rd + 1;
    wr = wr + 1 == kSlots ? 0 : wr + 1;
    const int rs = (st * rps + sub) & (kTeam - 1);  // row of the group, and the lane holding its weights
    const int rr = st * rps + sub;  // row of the run
    const bool ok = inrow && rr < nrt;
    float w[W], bias;
#pragma unroll
    for (int k = 0; k < W; ++k) w[k] = gpu_shfl(wl[k], rs, kTeam);
    bias = gpu_shfl(bl, rs, kTeam);
    float xf[kH + N];  // x̃ at pos-(W-1) .. pos+N-1
    float dv[N];
    {
      S xs[N], ds[N];
      __builtin_memcpy(xs, &xb, 16);
      __builtin_memcpy(ds, &db, 16);
      float xv[N];
      unpack_f<T, N>(xs, xv);
      unpack_f<T, N>(ds, dv);
#pragma unroll
      for (int e = 0; e < N; ++e) xf[kH + e] = xv[e];
    }
#pragma unroll
    for (int i = 0; i < kH; ++i) {
      const float got = gpu_shfl(xf[N + i], src_prev, kTeam);
      float own = 0.0f;
      if (p.has_init) own = gpu_shfl(il[i], rs, kTeam);
      xf[i] = first ? own : got;
    }
    float g[N];
#pragma unroll
    for (int e = 0; e < N; ++e) {
      if constexpr (kSilu) {
        float z = bias;
#pragma unroll
        for (int k = 0; k < W; ++k) z += w[k] * xf[e + k];
        g[e] = silu_backward_f(dv[e], z);
      } else {
        g[e] = dv[e];
      }
    }
    float gn[kH];  // g at pos+N .. pos+N+W-2, zero past L
#pragma unroll
    for (int i = 0; i < kH; ++i) {
      const float got = gpu_shfl(g[i], src_next, kTeam);
      gn[i] = pos + N + i < L ? got : 0.0f;
    }
    float fv[kH];
#pragma unroll
    for (int i = 0; i < kH; ++i) fv[i] = 0.0f;
    if (p.has_dfinal) {
#pragma unroll
      for (int i = 0; i < kH; ++i) fv[i] = gpu_shfl(fl[i], rs, kTeam);
    }
    float dws[W + 1];  // [W] is dbias
#pragma unroll
    for (int k = 0; k <= W; ++k) dws[k] = 0.0f;
    float dxv[N];
#pragma unroll
    for (int e = 0; e < N; ++e) {
      float acc = 0.0f;
#pragma unroll
      for (int k = 0; k < W; ++k) {
        const int idx = e + kH - k;
        acc += w[k] * (idx < N ? g[idx < N ? idx : 0] : gn[idx >= N ? idx - N : 0]);
      }
      if (p.has_dfinal) {
        // dfinal_states[i] adds to dx at L - (W-1) + i (L >= N > W-1).
#pragma unroll
        for (int i = 0; i < kH; ++i) {
          if (pos + e == L - kH + i) acc += fv[i];
        }
      }
      dxv[e] = acc;
      dws[W] += g[e];
#pragma unroll
      for (int k = 0; k < W; ++k) dws[k] += g[e] * xf[e + k];
    }
    const int64_t r = row_begin + rr;
    if (ok) store_f<T, N>(dxp + st * step_off, dxv);
    if (p.ret_dinit && first && ok) {
      // x̃ positions 0 .. W-2 before x; g at t < W-1 < N is this lane's.
      S* dinit = dinit0 + r * kH;
#pragma unroll
      for (int i = 0; i < kH; ++i) {
        float acc = 0.0f;
#pragma unroll
        for (int k = 0; k <= i; ++k) acc += w[k] * g[i - k];
        dinit[i] = T::from_f(acc);
      }
    }
    // The row's W + 1 sums over its lpr lanes (xor masks below lpr stay
    // inside the row's lane group), in a fixed order. A reduce-scatter:
    // at masks 1, 2 and 4 each lane pair splits the values it holds, so a
    // lane ends with one (lpr = 4: up to two) of them, chosen by its low
    // lane bits; plain butterflies over the higher masks do the rest, and
    // the first 8 lanes of the row store.
    constexpr int kN1 = (W + 2) / 2;    // values held after mask 1
    constexpr int kN2 = (kN1 + 1) / 2;  // after mask 2
    const int b0 = lane & 1, b1 = (lane >> 1) & 1, b2 = (lane >> 2) & 1;
    float h1[kN1], h2[kN2], h3[1];
    scatter_level<W + 1, kN1>(dws, h1, b0, 1);
    scatter_level<kN1, kN2>(h1, h2, b1, 2);
    const int kb = b0 ? kN1 : 0;              // h1[j] holds sum kb + j ..
    const int cnt = b0 ? W + 1 - kN1 : kN1;  // .. for j < cnt (zeros after)
    int j = b1 ? kN2 : 0;                     // h2[i] is h1[j + i]
    const int64_t d = mod_fast(r, p.dim);
    const bool rowv = rr < nrt && (lane & (lpr - 1)) < 8;
    const int64_t b = ws_off < 0 ? 0 : div_fast(r, p.dim);
    // Stores h1 slot jj of the row (sum k < W: dweight, k == W: dbias).
    auto put = [&](int jj, float v) {
      if (!rowv || jj >= cnt) return;
      const int k = kb + jj;
      if (ws_off < 0) {
        // B = 1 (planner): the channel's whole sum.
        if (k < W) store_any(dweight, d * W + k, p.gwtype, v);
        else if (p.has_bias) store_any(dbias, d, p.gwtype, v);
      } else {
        p.partials[ws_off + (d * seg_batch + b) * (W + 1) + k] = v;
      }
    };
    if (lpr == 4) {
#pragma unroll
      for (int i = 0; i < kN2; ++i) put(j + i, h2[i]);
    } else {
      scatter_level<kN2, 1>(h2, h3, b2, 4);
      if (kN2 > 1 && b2) j += 1;
#pragma unroll
      for (int m = 8; m < kTeam; m <<= 1) {
        if (m < lpr) h3[0] += gpu_shfl_xor(h3[0], m, kTeam);
      }
      put(j, h3[0]);
    }
  }
  copy_async_wait<0>();  // the ring is free for the team's next run
}

// Tiles of short-row vector segments (rows_per_tile > 1) go to
// bwd_cf_short_kernel and, in 16-bit types, long-row vector tiles to
// bwd_cf_stream_kernel; bwd_cf_kernel skips both (and they skip the rest),
// so each kernel gets its own register allocation.
__device__ __forceinline__ bool is_short_tile(const Conv1dSegment& seg) {
  return seg.vec && seg.rows_per_tile > 1;
}

// 16-bit long-row vector tiles (the planner's stream and walk ranges;
// ws_partial_offset < 0 goes to bwd_cf_walk_kernel).
template <class T>
__device__ __forceinline__ bool is_stream_tile(const Conv1dSegment& seg) {
  return sizeof(typename T::S) == 2 && seg.vec && seg.rows_per_tile == 1;
}

template <class T, int W>
__global__ void __launch_bounds__(kTeam * kTeamsPerBlock,
                                  detail::BwdMinBlocks(sizeof(typename T::S))) bwd_cf_kernel(KParams p) {
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
      constexpr int N = kVecElts<T>;
      constexpr int kMax = detail::MaxPerLaneBwd(sizeof(typename T::S));
      const int64_t nchunks = seg.nchunks;
      const int64_t row = div_fast(local, nchunks);
      const int64_t chunk = local - row * nchunks;
      const bool full = seg.per_lane == kMax &&
                        (chunk + 1) * static_cast<int64_t>(kTeam * kMax * N) <= seg.seqlen &&
                        !(p.has_dfinal && chunk + 1 == nchunks) && !(p.ret_dinit && chunk == 0);
      if (!full) bwd_cf_team<T, N, W, false, 0>(p, seg, local, lane, row, chunk);
      else if (p.silu) bwd_cf_team<T, N, W, false, 1>(p, seg, local, lane, row, chunk);
      else bwd_cf_team<T, N, W, false, 2>(p, seg, local, lane, row, chunk);
    } else {
      bwd_cf_team_loads<T, 1, W>(p, seg, local, lane);
    }
  }
}

template <class T, int W>
__global__ void __launch_bounds__(kTeam * kTeamsPerBlock,
                                  detail::BwdShortMinBlocks(sizeof(typename T::S)))
    bwd_cf_short_kernel(KParams p) {
  // Each team's ring of in-flight steps (bwd_cf_rows_team, bwd_cf_run_team).
  __shared__ uint4 stage[kTeamsPerBlock][detail::kBwdShortPrefetch + 1][2][kTeam];
  const int lane = threadIdx.x % kTeam;
  const int team = threadIdx.x / kTeam;
  const int64_t ntiles = p.total_tiles - p.tile_begin;
  if constexpr (!detail::BwdShortPersist(sizeof(typename T::S))) {
    // One tile per team.
    for (int64_t blk = blockIdx.x; blk * kTeamsPerBlock < ntiles; blk += gridDim.x) {
      const int64_t tile = p.tile_begin + blk * kTeamsPerBlock + team;
      if (tile >= p.total_tiles) continue;
      // By reference: fields are read where used (the dweight pointers only
      // at the end), which keeps them out of registers across the tile.
      const Conv1dSegment& seg = p.segs[find_segment_team(p.segs, p.nseg, tile, lane)];
      if (!is_short_tile(seg)) continue;
      bwd_cf_rows_team<T, W>(p, seg, tile - seg.tile_begin, lane, stage[team]);
    }
  } else {
    // Team g of G takes the contiguous tiles [T * g / G, T * (g + 1) / G)
    // and walks each segment's part of them as one run (bwd_cf_run_team),
    // so the ring keeps running from tile to tile; the launcher sizes the
    // grid to the blocks the device holds at once, which gives every team
    // an even share.
    const int64_t nteams = static_cast<int64_t>(gridDim.x) * kTeamsPerBlock;
    const int64_t gteam = static_cast<int64_t>(blockIdx.x) * kTeamsPerBlock + team;
    int64_t tile = p.tile_begin + ntiles * gteam / nteams;
    for (;;) {
      // Recomputed per run rather than kept live across the walk.
      const int64_t tile_end = p.tile_begin + ntiles * (gteam + 1) / nteams;
      if (tile >= tile_end) break;
      const int idx = find_segment_team(p.segs, p.nseg, tile, lane);
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
      if (p.silu) bwd_cf_run_team<T, W, true>(p, seg, row_begin, nrt, lane, stage[team]);
      else bwd_cf_run_team<T, W, false>(p, seg, row_begin, nrt, lane, stage[team]);
      tile += run;
    }
  }
}

template <class T, int W>
__global__ void __launch_bounds__(kTeam * kTeamsPerBlock, CONV1D_BWD_STREAM_MIN_BLOCKS)
    bwd_cf_stream_kernel(KParams p) {
  // Each team's ring of in-flight steps (bwd_cf_stream_team).
  __shared__ uint4 stage[kTeamsPerBlock][detail::kBwdStreamPrefetch + 1][2][kTeam];
  const int lane = threadIdx.x % kTeam;
  const int team = threadIdx.x / kTeam;
  const int64_t ntiles = p.total_tiles - p.tile_begin;
  for (int64_t blk = blockIdx.x; blk * kTeamsPerBlock < ntiles; blk += gridDim.x) {
    const int64_t tile = p.tile_begin + blk * kTeamsPerBlock + team;
    if (tile >= p.total_tiles) continue;
    const Conv1dSegment& seg = p.segs[find_segment_team(p.segs, p.nseg, tile, lane)];
    if (!is_stream_tile<T>(seg) || seg.ws_partial_offset < 0) continue;
    if (p.silu) bwd_cf_stream_team<T, W, true>(p, seg, tile - seg.tile_begin, lane, stage[team]);
    else bwd_cf_stream_team<T, W, false>(p, seg, tile - seg.tile_begin, lane, stage[team]);
  }
}

// The walk range: bwd_cf_stream_walk, a channel per tile (its own kernel, so
// that bwd_cf_stream_kernel keeps its register allocation).
template <class T, int W>
__global__ void __launch_bounds__(kTeam * detail::kBwdWalkTeams, CONV1D_BWD_WALK_MIN_BLOCKS)
    bwd_cf_walk_kernel(KParams p) {
  constexpr int kTeams = detail::kBwdWalkTeams;
  __shared__ uint4 stage[kTeams][detail::kBwdStreamPrefetch + 1][2][kTeam];
  const int lane = threadIdx.x % kTeam;
  const int team = threadIdx.x / kTeam;
  const int64_t ntiles = p.total_tiles - p.tile_begin;
  for (int64_t blk = blockIdx.x; blk * kTeams < ntiles; blk += gridDim.x) {
    const int64_t tile = p.tile_begin + blk * kTeams + team;
    if (tile >= p.total_tiles) continue;
    const Conv1dSegment& seg = p.segs[find_segment_team(p.segs, p.nseg, tile, lane)];
    // See seg_lines_together.
    if (!(is_stream_tile<T>(seg) & (seg.ws_partial_offset < 0) & seg_lines_together(seg))) continue;
    if (p.silu) bwd_cf_stream_walk<T, W, true>(p, seg, tile - seg.tile_begin, lane, stage[team]);
    else bwd_cf_stream_walk<T, W, false>(p, seg, tile - seg.tile_begin, lane, stage[team]);
  }
}

// Channel-last (the scalar path, N = 1; vectors take bwd_cl_ring below):
// thread (tx, ty) owns channels d0..d0+N-1 and walks g over
// t0 .. t0+kSteps+W-2 in groups of kGrp steps (x and dout of the next group
// loaded while the current one is computed), carrying the last W-1 x and g
// in registers. It sums dweight/dbias over t0 .. t0+kSteps-1 and writes dx
// at x positions t0 .. t0+kSteps-1 (and dinitial_states from chunk 0).
template <class T, int N, int W>
__device__ __forceinline__ void bwd_cl_block(const KParams& p, const Conv1dSegment& seg,
                                             int64_t local, int tx, int ty, float* red) {
  using S = typename T::S;
  constexpr int kSteps = detail::kClStepsBwd;
  constexpr int kGrp = sizeof(S) == 4 ? detail::kClGroupBwd32 : detail::kClGroupBwd16;
  static_assert(kSteps % kGrp == 0, "whole groups");
  constexpr int kParts = N * (W + 1);
  const int64_t D = p.dim;
  const int64_t L = seg.seqlen;
  const int64_t B = seg.batch;
  const int64_t nD = D / N;
  const int64_t ndb = (nD + kClCols - 1) / kClCols;
  const int64_t ntb = seg.nchunks;
  const int64_t db_idx = local % ndb;
  const int64_t rest = local / ndb;
  const int64_t tb = rest % ntb;
  const int64_t b = rest / ntb;
  const int64_t dv = db_idx * kClCols + tx;
  const int64_t t0 = (tb * kClRows + ty) * kSteps;
  const bool active = dv < nD && t0 < L;
  const int64_t d0 = dv * N;

  float dw[N][W];
  float dbias[N];
#pragma unroll
  for (int e = 0; e < N; ++e) {
    dbias[e] = 0.0f;
#pragma unroll
    for (int k = 0; k < W; ++k) dw[e][k] = 0.0f;
  }

  if (active) {
    const S* xb = static_cast<const S*>(seg.in(Role::kX)) + b * L * D + d0;
    const S* gb = static_cast<const S*>(seg.in(Role::kDout)) + b * L * D + d0;
    S* dxb = static_cast<S*>(seg.out(Role::kDx)) + b * L * D + d0;
    const S* dfin = static_cast<const S*>(seg.in(Role::kDfinalStates));
    float w[N][W];
    float bias[N];
#pragma unroll
    for (int e = 0; e < N; ++e) {
#pragma unroll
      for (int k = 0; k < W; ++k) w[e][k] = load_any(seg.in(Role::kWeight), (d0 + e) * W + k, p.wtype);
      bias[e] = p.has_bias ? load_any(seg.in(Role::kBias), d0 + e, p.wtype) : 0.0f;
    }
    // x at t-(W-1) .. t-1 and g at t-(W-1) .. t-1 for the next step t.
    float xw[W - 1][N];
    float gw[W - 1][N];
#pragma unroll
    for (int i = 0; i < W - 1; ++i) {
      const int64_t t = t0 - (W - 1) + i;
      if (t >= 0) {
        load_f<T, N>(xb + t * D, xw[i]);
      } else {
        const S* init = static_cast<const S*>(seg.in(Role::kInitialStates));
#pragma unroll
        for (int e = 0; e < N; ++e) {
          xw[i][e] = p.has_init ? T::to_f(init[(b * D + d0 + e) * (W - 1) + (W - 1) + t]) : 0.0f;
        }
      }
#pragma unroll
      for (int e = 0; e < N; ++e) gw[i][e] = 0.0f;
    }

    // Groups holding steps below L (the last may run past it), then the
    // W-1 halo steps after them (dx of the last positions, dfinal); steps
    // i < nstep of the walk exist.
    const int64_t left = L - t0;
    const int ngrp = left >= kSteps ? kSteps / kGrp : static_cast<int>((left + kGrp - 1) / kGrp);
    const int nsum = ngrp * kGrp;
    const int nstep = nsum + W - 1;
    constexpr int kHaloGrp = (W - 1 + kGrp - 1) / kGrp;
    auto load_group = [&](int j, S (&xq)[kGrp][N], S (&dq)[kGrp][N]) {
#pragma unroll
      for (int q = 0; q < kGrp; ++q) {
        const int i = j * kGrp + q;
        const int64_t t = t0 + i;
        if (i < nstep && t < L) {
          load_raw<T, N>(xb + t * D, xq[q]);
          load_raw<T, N>(gb + t * D, dq[q]);
        } else {
#pragma unroll
          for (int e = 0; e < N; ++e) xq[q][e] = dq[q][e] = T::from_f(0.0f);
        }
      }
    };
    // One step at t (g index i = t - t0): g, dweight (if sum), dx at t-(W-1).
    auto step = [&](const S (&xs)[N], const S (&ds)[N], int64_t t, bool sum, bool emit) {
      float xv[N], dvv[N];
      unpack_f<T, N>(xs, xv);
      unpack_f<T, N>(ds, dvv);
      const bool in = t < L;
      const int64_t pos = t - (W - 1);
      float acc[N];
#pragma unroll
      for (int e = 0; e < N; ++e) {
        float gv = 0.0f;
        if (in) {
          float z = bias[e];
          if (p.silu) {
#pragma unroll
            for (int k = 0; k < W - 1; ++k) z += w[e][k] * xw[k][e];
            z += w[e][W - 1] * xv[e];
          }
          gv = grad_of(dvv[e], z, p.silu);
          if (sum) {
            dbias[e] += gv;
#pragma unroll
            for (int k = 0; k < W - 1; ++k) dw[e][k] += gv * xw[k][e];
            dw[e][W - 1] += gv * xv[e];
          }
        }
        float a = w[e][0] * gv;
#pragma unroll
        for (int k = 1; k < W; ++k) a += w[e][k] * gw[W - 1 - k][e];
        if (p.has_dfinal && !in && t - L < W - 1) {
          a += T::to_f(dfin[(b * D + d0 + e) * (W - 1) + (t - L)]);
        }
        acc[e] = a;
#pragma unroll
        for (int k = 0; k < W - 2; ++k) {
          xw[k][e] = xw[k + 1][e];
          gw[k][e] = gw[k + 1][e];
        }
        xw[W - 2][e] = xv[e];
        gw[W - 2][e] = gv;
      }
      if (emit) {
        if (pos >= 0) {
          store_f<T, N>(dxb + pos * D, acc);
        } else if (p.ret_dinit) {
          S* dinit = static_cast<S*>(seg.out(Role::kDinitialStates));
#pragma unroll
          for (int e = 0; e < N; ++e) dinit[(b * D + d0 + e) * (W - 1) + t] = T::from_f(acc[e]);
        }
      }
    };

    S xn[kGrp][N], dn[kGrp][N];
    load_group(0, xn, dn);
#pragma unroll 1
    for (int j = 0; j < ngrp + kHaloGrp; ++j) {
      S xc[kGrp][N], dc[kGrp][N];
#pragma unroll
      for (int q = 0; q < kGrp; ++q) {
#pragma unroll
        for (int e = 0; e < N; ++e) {
          xc[q][e] = xn[q][e];
          dc[q][e] = dn[q][e];
        }
      }
      if (j + 1 < ngrp + kHaloGrp) load_group(j + 1, xn, dn);
#pragma unroll
      for (int q = 0; q < kGrp; ++q) {
        const int i = j * kGrp + q;
        const int64_t t = t0 + i;
        // dx at t-(W-1) < L; positions before t0 belong to the previous
        // chunk, except in chunk 0 (dinitial_states, g before 0 is zero).
        if (i < nstep) {
          step(xc[q], dc[q], t, i < nsum, (i >= W - 1 || t0 == 0) && t - (W - 1) < L);
        }
      }
    }
  }

  // Block partial over the kClRows time chunks (fixed order) -> workspace;
  // reduce_dw_kernel finishes per channel.
  float* mine = red + (ty * kClCols + tx) * kParts;
#pragma unroll
  for (int e = 0; e < N; ++e) {
#pragma unroll
    for (int k = 0; k < W; ++k) mine[e * (W + 1) + k] = dw[e][k];
    mine[e * (W + 1) + W] = dbias[e];
  }
  __syncthreads();
  const int64_t nparts = B * ntb;
  float* part = p.partials + seg.ws_partial_offset;
  if (ty == 0 && dv < nD) {
    for (int e = 0; e < N; ++e) {
      for (int k = 0; k <= W; ++k) {
        float acc = 0.0f;
        for (int r = 0; r < kClRows; ++r) acc += red[(r * kClCols + tx) * kParts + e * (W + 1) + k];
        part[((d0 + e) * nparts + b * ntb + tb) * (W + 1) + k] = acc;
      }
    }
  }
  __syncthreads();
}

// Channel-last vector path: the walk of bwd_cl_block (N = kClVecBwd), with
// the x and dout vectors of the next kP steps in flight as asynchronous
// copies into this thread's slots of a shared-memory ring (`ring`: slot s,
// x (0) or dout (1), thread th at ring[(2 s + kind) * threads + th]), so
// that they hold no registers. `red` aliases the ring.
template <class T, int W, bool kSilu>
__device__ __forceinline__ void bwd_cl_ring(const KParams& p, const Conv1dSegment& seg,
                                            int64_t local, int tx, int ty, void* ring_mem,
                                            float* red) {
  using S = typename T::S;
  constexpr int N = detail::kClVecBwd;
  constexpr int kSteps = detail::kClStepsBwd;
  constexpr int kP = detail::ClBwdPrefetch(sizeof(S));
  constexpr int kSlots = kP + 1;
  constexpr int kVB = N * static_cast<int>(sizeof(S));
  static_assert(kVB == 16 || kVB == 8, "8- or 16-byte vectors");
  using V = typename std::conditional<kVB == 16, uint4, uint2>::type;
  constexpr int kThreads = kClCols * kClRows;
  constexpr int kParts = N * (W + 1);
  V* ring = static_cast<V*>(ring_mem);
  const int th = ty * kClCols + tx;
  const int64_t D = p.dim;
  const int64_t L = seg.seqlen;
  const int64_t B = seg.batch;
  const int64_t nD = D / N;
  const int64_t ndb = (nD + kClCols - 1) / kClCols;
  const int64_t ntb = seg.nchunks;
  const int64_t db_idx = local % ndb;
  const int64_t rest = local / ndb;
  const int64_t tb = rest % ntb;
  const int64_t b = rest / ntb;
  const int64_t dv = db_idx * kClCols + tx;
  const int64_t t0 = (tb * kClRows + ty) * kSteps;
  const bool active = dv < nD && t0 < L;
  const int64_t d0 = dv * N;

  float dw[N][W];
  float dbias[N];
#pragma unroll
  for (int e = 0; e < N; ++e) {
    dbias[e] = 0.0f;
#pragma unroll
    for (int k = 0; k < W; ++k) dw[e][k] = 0.0f;
  }

  if (active) {
    const S* xb = static_cast<const S*>(seg.in(Role::kX)) + b * L * D + d0;
    const S* gb = static_cast<const S*>(seg.in(Role::kDout)) + b * L * D + d0;
    S* dxb = static_cast<S*>(seg.out(Role::kDx)) + b * L * D + d0;
    // Steps i < nstep of the walk: t = t0 + i; g summed for i < nsum, the
    // W-1 after them are the right halo (dx of the last positions, dfinal).
    const int64_t left = L - t0;
    const int nsum = left >= kSteps ? kSteps : static_cast<int>(left);
    const int nstep = nsum + W - 1;
    // Step i's vectors into slot `slot` (zeros past L); one group per call,
    // empty past the walk.
    const S* xi = xb + t0 * D;
    const S* gi = gb + t0 * D;
    int64_t ti = t0;
    int ni = 0;
    auto issue = [&](int slot) {
      if (ni < nstep) {
        const bool ok = ti < L;
        if constexpr (kVB == 16) {
          copy16_async(&ring[(2 * slot) * kThreads + th], ok ? xi : xb, ok ? 16 : 0);
          copy16_async(&ring[(2 * slot + 1) * kThreads + th], ok ? gi : gb, ok ? 16 : 0);
        } else {
          copy8_async(&ring[(2 * slot) * kThreads + th], ok ? xi : xb, ok ? 8 : 0);
          copy8_async(&ring[(2 * slot + 1) * kThreads + th], ok ? gi : gb, ok ? 8 : 0);
        }
      }
      copy_async_commit();
      xi += D;
      gi += D;
      ++ti;
      ++ni;
    };
#pragma unroll
    for (int q = 0; q < kP; ++q) issue(q);

    const S* dfin = static_cast<const S*>(seg.in(Role::kDfinalStates));
    float w[N][W];
    float bias[N];
#pragma unroll
    for (int e = 0; e < N; ++e) {
#pragma unroll
      for (int k = 0; k < W; ++k) w[e][k] = load_any(seg.in(Role::kWeight), (d0 + e) * W + k, p.wtype);
      bias[e] = p.has_bias ? load_any(seg.in(Role::kBias), d0 + e, p.wtype) : 0.0f;
    }
    // x at t-(W-1) .. t-1 and g at t-(W-1) .. t-1 for the next step t.
    float xw[W - 1][N];
    float gw[W - 1][N];
#pragma unroll
    for (int i = 0; i < W - 1; ++i) {
      const int64_t t = t0 - (W - 1) + i;
      if (t >= 0) {
        load_f<T, N>(xb + t * D, xw[i]);
      } else {
        const S* init = static_cast<const S*>(seg.in(Role::kInitialStates));
#pragma unroll
        for (int e = 0; e < N; ++e) {
          xw[i][e] = p.has_init ? T::to_f(init[(b * D + d0 + e) * (W - 1) + (W - 1) + t]) : 0.0f;
        }
      }
#pragma unroll
      for (int e = 0; e < N; ++e) gw[i][e] = 0.0f;
    }

    int rd = 0, wr = kP;  // slots of the step to compute and of the next issue
    S* dxt = dxb + (t0 - (W - 1)) * D;  // dx at the current step's output position
    auto body = [&](int i) {
      copy_async_wait<kP - 1>();  // step i's group has landed
      const V xr = ring[(2 * rd) * kThreads + th];
      const V dr = ring[(2 * rd + 1) * kThreads + th];
      issue(wr);
      rd = rd + 1 == kSlots ? 0 : rd + 1;
      wr = wr + 1 == kSlots ? 0 : wr + 1;
      float xv[N], dvv[N];
      {
        S xs[N], ds[N];
        __builtin_memcpy(xs, &xr, kVB);
        __builtin_memcpy(ds, &dr, kVB);
        unpack_f<T, N>(xs, xv);
        unpack_f<T, N>(ds, dvv);
      }
      const int64_t t = t0 + i;
      const bool in = i < nsum || t < L;  // i < nsum implies t < L
      const bool sum = i < nsum;
      float acc[N];
#pragma unroll
      for (int e = 0; e < N; ++e) {
        float gv = 0.0f;
        if (in) {
          float z = bias[e];
          if constexpr (kSilu) {
#pragma unroll
            for (int k = 0; k < W - 1; ++k) z += w[e][k] * xw[k][e];
            z += w[e][W - 1] * xv[e];
          }
          gv = grad_of(dvv[e], z, kSilu);
          if (sum) {
            dbias[e] += gv;
#pragma unroll
            for (int k = 0; k < W - 1; ++k) dw[e][k] += gv * xw[k][e];
            dw[e][W - 1] += gv * xv[e];
          }
        }
        float a = w[e][0] * gv;
#pragma unroll
        for (int k = 1; k < W; ++k) a += w[e][k] * gw[W - 1 - k][e];
        if (p.has_dfinal && !in && t - L < W - 1) {
          a += T::to_f(dfin[(b * D + d0 + e) * (W - 1) + (t - L)]);
        }
        acc[e] = a;
#pragma unroll
        for (int k = 0; k < W - 2; ++k) {
          xw[k][e] = xw[k + 1][e];
          gw[k][e] = gw[k + 1][e];
        }
        xw[W - 2][e] = xv[e];
        gw[W - 2][e] = gv;
      }
      // dx at t-(W-1) < L; positions before t0 belong to the previous
      // chunk, except in chunk 0 (dinitial_states, g before 0 is zero).
      const int64_t pos = t - (W - 1);
      if ((i >= W - 1 || t0 == 0) && pos < L) {
        if (pos >= 0) {
          store_f<T, N>(dxt, acc);
        } else if (p.ret_dinit) {
          S* dinit = static_cast<S*>(seg.out(Role::kDinitialStates));
#pragma unroll
          for (int e = 0; e < N; ++e) dinit[(b * D + d0 + e) * (W - 1) + t] = T::from_f(acc[e]);
        }
      }
      dxt += D;
    };
    int i0 = 0;
#if CONV1D_CL_BWD_ROTATE
    // W-1 steps per iteration: the x and g windows come back to the same
    // registers, so shifting them costs no moves.
    constexpr int kU = W - 1;
    if constexpr (kU > 1) {
#pragma unroll 1
      for (; i0 + kU <= nstep; i0 += kU) {
#pragma unroll
        for (int q = 0; q < kU; ++q) body(i0 + q);
      }
    }
#endif
#pragma unroll 1
    for (; i0 < nstep; ++i0) body(i0);
    copy_async_wait<0>();
  }

  // Block partial over the kClRows time chunks (fixed order) -> workspace;
  // reduce_dw_kernel finishes per channel. `red` aliases the ring.
  __syncthreads();
  float* mine = red + th * kParts;
#pragma unroll
  for (int e = 0; e < N; ++e) {
#pragma unroll
    for (int k = 0; k < W; ++k) mine[e * (W + 1) + k] = dw[e][k];
    mine[e * (W + 1) + W] = dbias[e];
  }
  __syncthreads();
  const int64_t nparts = B * ntb;
  float* part = p.partials + seg.ws_partial_offset;
  if (ty == 0 && dv < nD) {
    for (int e = 0; e < N; ++e) {
      for (int k = 0; k <= W; ++k) {
        float acc = 0.0f;
        for (int r = 0; r < kClRows; ++r) acc += red[(r * kClCols + tx) * kParts + e * (W + 1) + k];
        part[((d0 + e) * nparts + b * ntb + tb) * (W + 1) + k] = acc;
      }
    }
  }
  __syncthreads();
}

template <class T, int W>
__global__ void __launch_bounds__(kClCols * kClRows, CONV1D_CL_BWD_MIN_BLOCKS) bwd_cl_kernel(KParams p) {
  constexpr int kRedBytes = kClRows * kClCols * detail::kClVecBwd * (W + 1) * 4;
  constexpr int kRingBytes = detail::ClBwdRingBytes(sizeof(typename T::S));
  __shared__ uint4 smem[(kRedBytes > kRingBytes ? kRedBytes : kRingBytes) / 16];
  float* red = reinterpret_cast<float*>(smem);
  const int tx = threadIdx.x % kClCols;
  const int ty = threadIdx.x / kClCols;
  for (int64_t tile = blockIdx.x; tile < p.total_tiles; tile += gridDim.x) {
    const Conv1dSegment seg = p.segs[find_segment_team(p.segs, p.nseg, tile, tx)];
    if (seg.vec) {
      if (p.silu) bwd_cl_ring<T, W, true>(p, seg, tile - seg.tile_begin, tx, ty, smem, red);
      else bwd_cl_ring<T, W, false>(p, seg, tile - seg.tile_begin, tx, ty, smem, red);
    } else {
      bwd_cl_block<T, 1, W>(p, seg, tile - seg.tile_begin, tx, ty, red);
    }
  }
}

hipError_t LaunchReduce(const KParams& k, hipStream_t s) {
  const hipError_t e = hipGetLastError();
  if (e != hipSuccess) return e;
  const int64_t teams = static_cast<int64_t>(k.nseg) * k.dim;
  reduce_dw_kernel<<<GridFor((teams + kTeamsPerBlock - 1) / kTeamsPerBlock), kTeam * kTeamsPerBlock, 0, s>>>(k);
  return hipGetLastError();
}

template <class T>
hipError_t LaunchCf(const KParams& k0, const Conv1dPlanInfo& plan, hipStream_t s) {
  if (k0.width < 2 || k0.width > 4) return hipErrorInvalidValue;
  const unsigned block = kTeam * kTeamsPerBlock;
  KParams k = k0;
  if (plan.long_tile_end > plan.long_tile_begin) {
    k.tile_begin = plan.long_tile_begin;
    k.total_tiles = plan.long_tile_end;
    const unsigned grid = GridFor((k.total_tiles - k.tile_begin + kTeamsPerBlock - 1) / kTeamsPerBlock);
    switch (k.width) {
      case 2: bwd_cf_kernel<T, 2><<<grid, block, 0, s>>>(k); break;
      case 3: bwd_cf_kernel<T, 3><<<grid, block, 0, s>>>(k); break;
      default: bwd_cf_kernel<T, 4><<<grid, block, 0, s>>>(k); break;
    }
  }
  if (plan.short_tile_end > plan.short_tile_begin) {
    k.tile_begin = plan.short_tile_begin;
    k.total_tiles = plan.short_tile_end;
    unsigned grid = GridFor((k.total_tiles - k.tile_begin + kTeamsPerBlock - 1) / kTeamsPerBlock);
    if (detail::BwdShortPersist(sizeof(typename T::S))) {
      // No more blocks than the device holds at once (bwd_cf_short_kernel).
      int dev = 0, sms = 0;
      if (hipGetDevice(&dev) == hipSuccess &&
          hipDeviceGetAttribute(&sms, hipDeviceAttributeMultiprocessorCount, dev) == hipSuccess && sms > 0) {
        const unsigned resident =
            static_cast<unsigned>(sms) * detail::BwdShortMinBlocks(sizeof(typename T::S));
        if (grid > resident) grid = resident;
      }
    }
    switch (k.width) {
      case 2: bwd_cf_short_kernel<T, 2><<<grid, block, 0, s>>>(k); break;
      case 3: bwd_cf_short_kernel<T, 3><<<grid, block, 0, s>>>(k); break;
      default: bwd_cf_short_kernel<T, 4><<<grid, block, 0, s>>>(k); break;
    }
  }
  if constexpr (sizeof(typename T::S) == 2) {
    if (plan.stream_tile_end > plan.stream_tile_begin) {
      k.tile_begin = plan.stream_tile_begin;
      k.total_tiles = plan.stream_tile_end;
      const unsigned grid = GridFor((k.total_tiles - k.tile_begin + kTeamsPerBlock - 1) / kTeamsPerBlock);
      switch (k.width) {
        case 2: bwd_cf_stream_kernel<T, 2><<<grid, block, 0, s>>>(k); break;
        case 3: bwd_cf_stream_kernel<T, 3><<<grid, block, 0, s>>>(k); break;
        default: bwd_cf_stream_kernel<T, 4><<<grid, block, 0, s>>>(k); break;
      }
    }
    if (plan.walk_tile_end > plan.walk_tile_begin) {
      constexpr int kTeams = detail::kBwdWalkTeams;
      k.tile_begin = plan.walk_tile_begin;
      k.total_tiles = plan.walk_tile_end;
      const unsigned grid = GridFor((k.total_tiles - k.tile_begin + kTeams - 1) / kTeams);
      const unsigned wblock = kTeam * kTeams;
      switch (k.width) {
        case 2: bwd_cf_walk_kernel<T, 2><<<grid, wblock, 0, s>>>(k); break;
        case 3: bwd_cf_walk_kernel<T, 3><<<grid, wblock, 0, s>>>(k); break;
        default: bwd_cf_walk_kernel<T, 4><<<grid, wblock, 0, s>>>(k); break;
      }
    }
  }
  if (!plan.reduce_dw) return hipGetLastError();
  return LaunchReduce(k0, s);
}

template <class T>
hipError_t LaunchCl(const KParams& k, hipStream_t s) {
  const unsigned grid = GridFor(k.total_tiles);
  const unsigned block = kClCols * kClRows;
  switch (k.width) {
    case 2: bwd_cl_kernel<T, 2><<<grid, block, 0, s>>>(k); break;
    case 3: bwd_cl_kernel<T, 3><<<grid, block, 0, s>>>(k); break;
    case 4: bwd_cl_kernel<T, 4><<<grid, block, 0, s>>>(k); break;
    default: return hipErrorInvalidValue;
  }
  return LaunchReduce(k, s);
}

}  // namespace

namespace detail {

int32_t LaunchBwdChannelFirst(const Conv1dProblem& p, const Conv1dPlanInfo& plan,
                              const Conv1dSegment* segs, void* ws, Stream s) {
  const KParams k = MakeParams(p, plan, segs, ws);
  const auto st = static_cast<hipStream_t>(s);
  switch (p.x_type) {
    case ScalarType::kF32: return LaunchCf<F32>(k, plan, st);
    case ScalarType::kF16: return LaunchCf<F16>(k, plan, st);
    case ScalarType::kBF16: return LaunchCf<BF16>(k, plan, st);
  }
  return hipErrorInvalidValue;
}

int32_t LaunchBwdChannelLast(const Conv1dProblem& p, const Conv1dPlanInfo& plan,
                             const Conv1dSegment* segs, void* ws, Stream s) {
  const KParams k = MakeParams(p, plan, segs, ws);
  const auto st = static_cast<hipStream_t>(s);
  switch (p.x_type) {
    case ScalarType::kF32: return LaunchCl<F32>(k, st);
    case ScalarType::kF16: return LaunchCl<F16>(k, st);
    case ScalarType::kBF16: return LaunchCl<BF16>(k, st);
  }
  return hipErrorInvalidValue;
}

}  // namespace detail
}  // namespace conv1d::kernels
