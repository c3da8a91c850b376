// Backward kernels of the fast path (W = 2..4) over a ragged segment table:
// dx, dweight, dbias, dinitial_states (with dfinal_states flowing in) in one
// launch. dweight/dbias are deterministic: each work unit writes fp32
// partials to the workspace, and the last unit of a channel (or channel
// block) to arrive sums them in a fixed order and writes the result.
#include "kernels/conv1d_device.h"

namespace conv1d::kernels {
namespace {

using namespace dev;
using detail::kClCols;
using detail::kClRows;
using detail::kMaxPerLane;
using detail::kTeam;
using detail::kTeamsPerBlock;

__device__ __forceinline__ float grad_of(float dout, float z, bool silu) {
  return silu ? dout * silu_grad_f(z) : dout;
}

// g at position q of a channel-first row, recomputed from memory (used for
// the few positions just past a team's chunk).
template <class T, int W>
__device__ float g_at_cf(const KParams& p, const Conv1dSegment& seg, const typename T::S* xrow,
                         const typename T::S* drow, int64_t row, int64_t q, const float (&w)[W],
                         float bias) {
  if (q >= seg.seqlen) return 0.0f;
  const float dout = T::to_f(drow[q]);
  if (!p.silu) return dout;
  float z = bias;
#pragma unroll
  for (int k = 0; k < W; ++k) z += w[k] * x_tilde_cf<T>(p, seg, xrow, row, q - (W - 1) + k, W);
  return grad_of(dout, z, true);
}

template <class T, int N, int W>
__device__ __forceinline__ void bwd_cf_team(const KParams& p, const Conv1dSegment& seg,
                                            int64_t local, int lane) {
  using S = typename T::S;
  const int64_t L = seg.seqlen;
  const int64_t B = seg.batch;
  const int V = seg.per_lane;
  const int64_t nchunks = seg.nchunks;
  const int64_t row = local / nchunks;
  const int64_t chunk = local - row * nchunks;
  const int64_t d = row % p.dim;
  const int64_t b = row / p.dim;
  const int64_t c0 = chunk * static_cast<int64_t>(kTeam * V * N);
  const S* xrow = static_cast<const S*>(seg.x) + row * L;
  const S* drow = static_cast<const S*>(seg.dout) + row * L;
  S* dxrow = static_cast<S*>(seg.dx) + row * L;

  float xv[kMaxPerLane][N];
  float g[kMaxPerLane][N];  // holds dout until g is computed
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j) {
    const int64_t pos = c0 + static_cast<int64_t>(j * kTeam + lane) * N;
    if (j < V && pos < L) {
      load_f<T, N>(xrow + pos, xv[j]);
      load_f<T, N>(drow + pos, g[j]);
    } else {
#pragma unroll
      for (int e = 0; e < N; ++e) xv[j][e] = g[j][e] = 0.0f;
    }
  }
  float w[W];
#pragma unroll
  for (int k = 0; k < W; ++k) w[k] = load_any(seg.weight, d * W + k, p.wtype);
  const float bias = p.has_bias ? load_any(seg.bias, d, p.wtype) : 0.0f;

  float hist[kMaxPerLane][W - 1];
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j) {
    if (j < V) {  // uniform across the team
      const int64_t pos = c0 + static_cast<int64_t>(j * kTeam + lane) * N;
      cf_history<T, N, W>(p, seg, xrow, row, xv[j], xv[j > 0 ? j - 1 : 0], j > 0, lane, pos, hist[j]);
      if (p.silu) {
#pragma unroll
        for (int e = 0; e < N; ++e) {
          float z = bias;
#pragma unroll
          for (int k = 0; k < W; ++k) {
            const int idx = e + k - (W - 1);
            z += w[k] * (idx >= 0 ? xv[j][idx >= 0 ? idx : 0] : hist[j][idx < 0 ? W - 1 + idx : 0]);
          }
          g[j][e] = grad_of(g[j][e], z, true);
        }
      }
    }
  }

  float dw[W];
  float db = 0.0f;
#pragma unroll
  for (int k = 0; k < W; ++k) dw[k] = 0.0f;
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j) {
    if (j < V) {  // uniform across the team
      const int64_t pos = c0 + static_cast<int64_t>(j * kTeam + lane) * N;
      // g at pos+N .. pos+N+W-2, from the lanes to the right.
      float gf[W - 1];
#pragma unroll
      for (int f = 0; f < W - 1; ++f) {
        const int off = N + f;
        const int s = off / N;
        const int e = off - s * N;
        const int src = (lane + s) & (kTeam - 1);
        const float a = gpu_shfl(g[j][e], src, kTeam);
        const float nxt = gpu_shfl(g[j + 1 < kMaxPerLane ? j + 1 : j][e], src, kTeam);
        float v;
        if (lane + s < kTeam) v = a;
        else if (j + 1 < V) v = nxt;
        else v = g_at_cf<T, W>(p, seg, xrow, drow, row, pos + off, w, bias);
        gf[f] = v;
      }
      if (pos < L) {
        float dxv[N];
#pragma unroll
        for (int e = 0; e < N; ++e) {
          float acc = 0.0f;
#pragma unroll
          for (int k = 0; k < W; ++k) {
            const int idx = e + (W - 1) - k;
            acc += w[k] * (idx < N ? g[j][idx < N ? idx : 0] : gf[idx >= N ? idx - N : 0]);
          }
          if (p.has_dfinal) {
            const int64_t t = pos + e;
            if (t >= L - (W - 1)) {
              acc += T::to_f(static_cast<const S*>(seg.dfinal_states)[row * (W - 1) + t - (L - (W - 1))]);
            }
          }
          dxv[e] = acc;
        }
        store_f<T, N>(dxrow + pos, dxv);
      }
#pragma unroll
      for (int e = 0; e < N; ++e) {
        db += g[j][e];
#pragma unroll
        for (int k = 0; k < W; ++k) {
          const int idx = e + k - (W - 1);
          dw[k] += g[j][e] * (idx >= 0 ? xv[j][idx >= 0 ? idx : 0] : hist[j][idx < 0 ? W - 1 + idx : 0]);
        }
      }
    }
  }

  if (p.ret_dinit && chunk == 0) {
    float g0[W - 1];
#pragma unroll
    for (int t = 0; t < W - 1; ++t) g0[t] = gpu_shfl(g[0][t % N], t / N, kTeam);
    if (lane == 0) {
      S* dinit = static_cast<S*>(seg.dinitial_states) + row * (W - 1);
#pragma unroll
      for (int i = 0; i < W - 1; ++i) {
        float acc = 0.0f;
#pragma unroll
        for (int k = 0; k <= i; ++k) acc += w[k] * g0[i - k];  // g0 is 0 past L
        if (p.has_dfinal && i >= L) {
          acc += T::to_f(static_cast<const S*>(seg.dfinal_states)[row * (W - 1) + i - L]);
        }
        dinit[i] = T::from_f(acc);
      }
    }
  }

  // Deterministic dweight/dbias: team partial -> workspace; the last team of
  // channel d sums the B*nchunks partials in index order.
#pragma unroll
  for (int k = 0; k < W; ++k) dw[k] = team_sum(dw[k]);
  db = team_sum(db);
  const int64_t nparts = B * nchunks;
  float* part = p.partials + seg.ws_partial_offset + d * nparts * (W + 1);
  if (lane == 0) {
    float* mine = part + (b * nchunks + chunk) * (W + 1);
#pragma unroll
    for (int k = 0; k < W; ++k) mine[k] = dw[k];
    mine[W] = db;
    __threadfence();
  }
  uint32_t* counter = p.counters + seg.ws_counter_offset + d;
  unsigned last = 0;
  if (lane == 0) last = atomicAdd(counter, 1u) == static_cast<uint32_t>(nparts - 1);
  last = gpu_shfl(last, 0, kTeam);
  if (last) {
    __threadfence();
    float acc[W + 1];
#pragma unroll
    for (int k = 0; k <= W; ++k) acc[k] = 0.0f;
    for (int64_t i = lane; i < nparts; i += kTeam) {
#pragma unroll
      for (int k = 0; k <= W; ++k) acc[k] += load_coherent(part + i * (W + 1) + k);
    }
#pragma unroll
    for (int k = 0; k <= W; ++k) acc[k] = team_sum(acc[k]);
    if (lane == 0) {
#pragma unroll
      for (int k = 0; k < W; ++k) store_any(seg.dweight, d * W + k, p.gwtype, acc[k]);
      if (p.has_bias) store_any(seg.dbias, d, p.gwtype, acc[W]);
      *counter = 0u;
    }
  }
}

template <class T, int W>
__global__ void __launch_bounds__(kTeam * kTeamsPerBlock) bwd_cf_kernel(KParams p) {
  const int lane = threadIdx.x % kTeam;
  const int team = threadIdx.x / kTeam;
  for (int64_t blk = blockIdx.x; blk * kTeamsPerBlock < p.total_tiles; blk += gridDim.x) {
    const int64_t tile = blk * kTeamsPerBlock + team;
    if (tile >= p.total_tiles) continue;
    const int s = find_segment(p.segs, p.nseg, tile);
    const Conv1dSegment& seg = p.segs[s];
    if (seg.vec) {
      bwd_cf_team<T, kVecElts<T>, W>(p, seg, tile - seg.tile_begin, lane);
    } else {
      bwd_cf_team<T, 1, W>(p, seg, tile - seg.tile_begin, lane);
    }
  }
}

// Channel-last: thread (tx, ty) owns channels d0..d0+N-1 and outputs dx for
// time steps t0 .. t0+kSteps-1, streaming g over t0 .. t0+kSteps+W-2.
template <class T, int N, int W>
__device__ __forceinline__ void bwd_cl_block(const KParams& p, const Conv1dSegment& seg,
                                             int64_t local, int tx, int ty, float* red,
                                             unsigned* flag) {
  using S = typename T::S;
  constexpr int kSteps = detail::kClStepsBwd;
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
    const S* xb = static_cast<const S*>(seg.x) + b * L * D + d0;
    const S* gb = static_cast<const S*>(seg.dout) + b * L * D + d0;
    S* dxb = static_cast<S*>(seg.dx) + b * L * D + d0;
    const S* init = static_cast<const S*>(seg.initial_states);
    const S* dfin = static_cast<const S*>(seg.dfinal_states);
    constexpr int kX = kSteps + 2 * (W - 1);  // x at t0-(W-1) .. t0+kSteps+W-2
    constexpr int kG = kSteps + W - 1;        // dout at t0 .. t0+kSteps+W-2
    S xs[kX][N];
    S ds[kG][N];
#pragma unroll
    for (int i = 0; i < kX; ++i) {
      const int64_t t = t0 - (W - 1) + i;
      if (t >= 0 && t < L) {
        load_raw<T, N>(xb + t * D, xs[i]);
      } else {
#pragma unroll
        for (int e = 0; e < N; ++e) {
          xs[i][e] = (t < 0 && p.has_init) ? init[(b * D + d0 + e) * (W - 1) + (W - 1) + t]
                                           : T::from_f(0.0f);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kG; ++i) {
      const int64_t t = t0 + i;
      if (t < L) {
        load_raw<T, N>(gb + t * D, ds[i]);
      } else {
#pragma unroll
        for (int e = 0; e < N; ++e) ds[i][e] = T::from_f(0.0f);
      }
    }
    float w[N][W];
    float bias[N];
#pragma unroll
    for (int e = 0; e < N; ++e) {
#pragma unroll
      for (int k = 0; k < W; ++k) w[e][k] = load_any(seg.weight, (d0 + e) * W + k, p.wtype);
      bias[e] = p.has_bias ? load_any(seg.bias, d0 + e, p.wtype) : 0.0f;
    }
    float g[kG][N];
#pragma unroll
    for (int i = 0; i < kG; ++i) {
      const int64_t t = t0 + i;
#pragma unroll
      for (int e = 0; e < N; ++e) {
        float gv = 0.0f;
        if (t < L) {
          float z = bias[e];
          if (p.silu) {
#pragma unroll
            for (int k = 0; k < W; ++k) z += w[e][k] * T::to_f(xs[i + k][e]);
          }
          gv = grad_of(T::to_f(ds[i][e]), z, p.silu);
          if (i < kSteps) {
            dbias[e] += gv;
#pragma unroll
            for (int k = 0; k < W; ++k) dw[e][k] += gv * T::to_f(xs[i + k][e]);
          }
        }
        g[i][e] = gv;
      }
      // dx̃ at x̃ index s = t (x position t-(W-1)); complete once i >= W-1,
      // or from the start in the first chunk (g before t = 0 is zero).
      if (i >= W - 1 || t0 == 0) {
        const int64_t tx_pos = t - (W - 1);
        float acc[N];
#pragma unroll
        for (int e = 0; e < N; ++e) {
          float a = 0.0f;
#pragma unroll
          for (int k = 0; k < W; ++k) {
            if (i - k >= 0) a += w[e][k] * g[i - k >= 0 ? i - k : 0][e];
          }
          if (p.has_dfinal && t >= L) a += T::to_f(dfin[(b * D + d0 + e) * (W - 1) + (t - L)]);
          acc[e] = a;
        }
        if (tx_pos >= 0) {
          if (tx_pos < L) store_f<T, N>(dxb + tx_pos * D, acc);
        } else if (p.ret_dinit) {
          S* dinit = static_cast<S*>(seg.dinitial_states);
#pragma unroll
          for (int e = 0; e < N; ++e) dinit[(b * D + d0 + e) * (W - 1) + t] = T::from_f(acc[e]);
        }
      }
    }
  }

  // Block partial over the kClRows time chunks (fixed order), then the last
  // block of this channel block sums all partials in index order.
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
    __threadfence();
  }
  __syncthreads();
  uint32_t* counter = p.counters + seg.ws_counter_offset + db_idx;
  if (threadIdx.x == 0) *flag = atomicAdd(counter, 1u) == static_cast<uint32_t>(nparts - 1);
  __syncthreads();
  if (*flag) {
    __threadfence();
    const int64_t c = db_idx * kClCols * N + threadIdx.x;
    if (threadIdx.x < kClCols * N && c < D) {
      for (int k = 0; k <= W; ++k) {
        float acc = 0.0f;
        for (int64_t i = 0; i < nparts; ++i) acc += load_coherent(part + (c * nparts + i) * (W + 1) + k);
        if (k < W) store_any(seg.dweight, c * W + k, p.gwtype, acc);
        else if (p.has_bias) store_any(seg.dbias, c, p.gwtype, acc);
      }
    }
    if (threadIdx.x == 0) *counter = 0u;
  }
  __syncthreads();
}

template <class T, int W>
__global__ void __launch_bounds__(kClCols * kClRows) bwd_cl_kernel(KParams p) {
  __shared__ float red[kClRows * kClCols * 4 * (W + 1)];
  __shared__ unsigned flag;
  const int tx = threadIdx.x % kClCols;
  const int ty = threadIdx.x / kClCols;
  for (int64_t tile = blockIdx.x; tile < p.total_tiles; tile += gridDim.x) {
    const int s = find_segment(p.segs, p.nseg, tile);
    const Conv1dSegment& seg = p.segs[s];
    if (seg.vec) {
      bwd_cl_block<T, 4, W>(p, seg, tile - seg.tile_begin, tx, ty, red, &flag);
    } else {
      bwd_cl_block<T, 1, W>(p, seg, tile - seg.tile_begin, tx, ty, red, &flag);
    }
  }
}

template <class T>
hipError_t LaunchCf(const KParams& k, hipStream_t s) {
  const unsigned grid = GridFor((k.total_tiles + kTeamsPerBlock - 1) / kTeamsPerBlock);
  const unsigned block = kTeam * kTeamsPerBlock;
  switch (k.width) {
    case 2: bwd_cf_kernel<T, 2><<<grid, block, 0, s>>>(k); break;
    case 3: bwd_cf_kernel<T, 3><<<grid, block, 0, s>>>(k); break;
    case 4: bwd_cf_kernel<T, 4><<<grid, block, 0, s>>>(k); break;
    default: return hipErrorInvalidValue;
  }
  return hipGetLastError();
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
  return hipGetLastError();
}

}  // namespace

namespace detail {

int32_t LaunchBwdChannelFirst(const Conv1dProblem& p, const Conv1dPlanInfo& plan,
                              const Conv1dSegment* segs, void* ws, Stream s) {
  const KParams k = MakeParams(p, plan, segs, ws);
  const auto st = static_cast<hipStream_t>(s);
  switch (p.x_type) {
    case ScalarType::kF32: return LaunchCf<F32>(k, st);
    case ScalarType::kF16: return LaunchCf<F16>(k, st);
    case ScalarType::kBF16: return LaunchCf<BF16>(k, st);
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
