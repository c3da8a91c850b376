// The channel-first backward of one tile with every halo loaded by the lane
// that needs it (bwd_cf_team_loads): the scalar path in every dtype. Used
// by kernels/bwd_cf_long.hip only. Device functions; no state.
#ifndef CONV1D_KERNELS_BWD_CF_LOADS_H_
#define CONV1D_KERNELS_BWD_CF_LOADS_H_

#include "kernels/bwd_common.h"

namespace conv1d::kernels::dev {

// Slots: per_lane consecutive elements of one row chunk (slot j of lane l
// at chunk element j * kTeam + l), or one element of each of rows_per_tile
// short rows. Each lane loads its x element with W-1 halo elements on both
// sides and its dout element with W-1 to the right (halos hit L1), so it
// can compute g on pos .. pos+N+W-2 and dx on pos .. pos+N-1 (N = 1)
// without talking to other lanes.
template <class T, int W>
__device__ __forceinline__ void bwd_cf_team_loads(const KParams& p, const Conv1dSegment& seg,
                                                  int64_t local, int lane) {
  using S = typename T::S;
  constexpr int N = 1;  // elements per slot
  constexpr int kMax = detail::MaxPerLaneBwd(W);
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
        float acc = dx_of_g<W, N>(w[j], g[j], gn[j], e);
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


}  // namespace conv1d::kernels::dev

#endif  // CONV1D_KERNELS_BWD_CF_LOADS_H_
