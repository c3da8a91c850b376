// The channel-last backward's pieces besides its ring walk (bwd_cl.hip):
// the scalar path (bwd_cl_block), for channels that are not whole
// vectors, and the block's dweight/dbias partial over its time chunks
// (store_cl_partials), which both paths end with.
//
// Included by bwd_cl.hip only. Device functions; no state.
#ifndef CONV1D_KERNELS_BWD_CL_BLOCK_H_
#define CONV1D_KERNELS_BWD_CL_BLOCK_H_

#include "kernels/bwd_common.h"

namespace conv1d::kernels::dev {
namespace {

using detail::kClCols;
using detail::kClRows;

// Thread (tx, ty)'s sums of N channels (dw, dbias) into `red` (kClRows x
// kClCols slots of N * (W + 1)), then, by row ty = 0, their sum over the
// kClRows time chunks in a fixed order into the workspace's partial
// `part_index` of `nparts` per channel (reduce_dw_kernel or the kernel's
// own reduction finishes per channel). Every thread of the block calls it
// (barriers); `red` must be free.
template <int N, int W>
__device__ __forceinline__ void store_cl_partials(const KParams& p, const Conv1dSegment& seg, float* red,
                                                  const float (&dw)[N][W], const float (&dbias)[N], int tx,
                                                  int ty, bool has_channels, int64_t d0, int64_t part_index,
                                                  int64_t nparts) {
  constexpr int kParts = N * (W + 1);
  float* mine = red + (ty * kClCols + tx) * kParts;
#pragma unroll
  for (int e = 0; e < N; ++e) {
#pragma unroll
    for (int k = 0; k < W; ++k) mine[e * (W + 1) + k] = dw[e][k];
    mine[e * (W + 1) + W] = dbias[e];
  }
  __syncthreads();
  float* part = p.partials + seg.ws_partial_offset;
  if (ty == 0 && has_channels) {
    for (int e = 0; e < N; ++e) {
      for (int k = 0; k <= W; ++k) {
        float acc = 0.0f;
        for (int r = 0; r < kClRows; ++r) acc += red[(r * kClCols + tx) * kParts + e * (W + 1) + k];
        part[((d0 + e) * nparts + part_index) * (W + 1) + k] = acc;
      }
    }
  }
  __syncthreads();
}

// Channel-last (the scalar path, N = 1; vectors take bwd_cl_ring in
// bwd_cl.hip):
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

  store_cl_partials<N, W>(p, seg, red, dw, dbias, tx, ty, dv < nD, d0, b * ntb + tb, B * ntb);
}

}  // namespace
}  // namespace conv1d::kernels::dev

#endif  // CONV1D_KERNELS_BWD_CL_BLOCK_H_
