// Forward kernels of the fast path (W = 2..4) over a ragged segment table:
// channel-first (a 32-lane team per row chunk, 16-byte vectors, halo by
// shuffles) and channel-last (each thread streams a time chunk of a channel
// vector with a register window). One launch covers every segment.
#include "kernels/conv1d_device.h"

namespace conv1d::kernels {
namespace {

using namespace dev;
using detail::kClCols;
using detail::kClRows;
using detail::kMaxPerLane;
using detail::kTeam;
using detail::kTeamsPerBlock;

template <class T, int N, int W>
__device__ __forceinline__ void fwd_cf_team(const KParams& p, const Conv1dSegment& seg,
                                            int64_t local, int lane) {
  using S = typename T::S;
  const int64_t L = seg.seqlen;
  const int V = seg.per_lane;
  const int64_t nchunks = seg.nchunks;
  const int64_t row = local / nchunks;
  const int64_t chunk = local - row * nchunks;
  const int64_t d = row % p.dim;
  const int64_t c0 = chunk * static_cast<int64_t>(kTeam * V * N);
  const S* xrow = static_cast<const S*>(seg.x) + row * L;
  S* yrow = static_cast<S*>(seg.y) + row * L;

  float xv[kMaxPerLane][N];
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j) {
    const int64_t pos = c0 + static_cast<int64_t>(j * kTeam + lane) * N;
    if (j < V && pos < L) {
      load_f<T, N>(xrow + pos, xv[j]);
    } else {
#pragma unroll
      for (int e = 0; e < N; ++e) xv[j][e] = 0.0f;
    }
  }
  float w[W];
#pragma unroll
  for (int k = 0; k < W; ++k) w[k] = load_any(seg.weight, d * W + k, p.wtype);
  const float bias = p.has_bias ? load_any(seg.bias, d, p.wtype) : 0.0f;

#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j) {
    if (j < V) {  // uniform across the team
      const int64_t pos = c0 + static_cast<int64_t>(j * kTeam + lane) * N;
      float hist[W - 1];
      cf_history<T, N, W>(p, seg, xrow, row, xv[j], xv[j > 0 ? j - 1 : 0], j > 0, lane, pos, hist);
      if (pos < L) {
        float out[N];
#pragma unroll
        for (int e = 0; e < N; ++e) {
          float z = bias;
#pragma unroll
          for (int k = 0; k < W; ++k) {
            const int idx = e + k - (W - 1);
            z += w[k] * (idx >= 0 ? xv[j][idx >= 0 ? idx : 0] : hist[idx < 0 ? W - 1 + idx : 0]);
          }
          out[e] = act_fwd(z, p.silu);
        }
        store_f<T, N>(yrow + pos, out);
      }
    }
  }

  if (p.ret_final && chunk == nchunks - 1 && lane == 0) {
    S* fin = static_cast<S*>(seg.final_states) + row * (W - 1);
    const S* init = static_cast<const S*>(seg.initial_states);
#pragma unroll
    for (int i = 0; i < W - 1; ++i) {
      const int64_t q = L - (W - 1) + i;
      S v;
      if (q >= 0) v = xrow[q];
      else if (p.has_init) v = init[row * (W - 1) + (W - 1) + q];
      else v = T::from_f(0.0f);
      fin[i] = v;
    }
  }
}

template <class T, int W>
__global__ void __launch_bounds__(kTeam * kTeamsPerBlock) fwd_cf_kernel(KParams p) {
  const int lane = threadIdx.x % kTeam;
  const int team = threadIdx.x / kTeam;
  for (int64_t blk = blockIdx.x; blk * kTeamsPerBlock < p.total_tiles; blk += gridDim.x) {
    const int64_t tile = blk * kTeamsPerBlock + team;
    if (tile >= p.total_tiles) continue;
    const int s = find_segment(p.segs, p.nseg, tile);
    const Conv1dSegment& seg = p.segs[s];
    if (seg.vec) {
      fwd_cf_team<T, kVecElts<T>, W>(p, seg, tile - seg.tile_begin, lane);
    } else {
      fwd_cf_team<T, 1, W>(p, seg, tile - seg.tile_begin, lane);
    }
  }
}

// Channel-last: thread (tx, ty) of tile (b, time block, channel block) owns
// channels d0 .. d0+N-1 and time steps t0 .. t0+kSteps-1.
template <class T, int N, int W>
__device__ __forceinline__ void fwd_cl_thread(const KParams& p, const Conv1dSegment& seg,
                                              int64_t local, int tx, int ty) {
  using S = typename T::S;
  constexpr int kSteps = detail::kClStepsFwd;
  const int64_t D = p.dim;
  const int64_t L = seg.seqlen;
  const int64_t nD = D / N;
  const int64_t ndb = (nD + kClCols - 1) / kClCols;
  const int64_t ntb = seg.nchunks;
  const int64_t db = local % ndb;
  const int64_t rest = local / ndb;
  const int64_t tb = rest % ntb;
  const int64_t b = rest / ntb;
  const int64_t dv = db * kClCols + tx;
  const int64_t t0 = (tb * kClRows + ty) * kSteps;
  if (dv >= nD || t0 >= L) return;
  const int64_t d0 = dv * N;
  const S* xb = static_cast<const S*>(seg.x) + b * L * D + d0;
  S* yb = static_cast<S*>(seg.y) + b * L * D + d0;

  S win[kSteps + W - 1][N];  // x̃ at t0-(W-1) .. t0+kSteps-1
#pragma unroll
  for (int i = 0; i < W - 1; ++i) {
    const int64_t t = t0 - (W - 1) + i;
    if (t >= 0) {
      load_raw<T, N>(xb + t * D, win[i]);
    } else {
#pragma unroll
      for (int e = 0; e < N; ++e) {
        win[i][e] = p.has_init ? static_cast<const S*>(seg.initial_states)
                                     [(b * D + d0 + e) * (W - 1) + (W - 1) + t]
                               : T::from_f(0.0f);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kSteps; ++i) {
    const int64_t t = t0 + i;
    if (t < L) {
      load_raw<T, N>(xb + t * D, win[W - 1 + i]);
    } else {
#pragma unroll
      for (int e = 0; e < N; ++e) win[W - 1 + i][e] = T::from_f(0.0f);
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
#pragma unroll
  for (int i = 0; i < kSteps; ++i) {
    const int64_t t = t0 + i;
    if (t < L) {
      float out[N];
#pragma unroll
      for (int e = 0; e < N; ++e) {
        float z = bias[e];
#pragma unroll
        for (int k = 0; k < W; ++k) z += w[e][k] * T::to_f(win[i + k][e]);
        out[e] = act_fwd(z, p.silu);
      }
      store_f<T, N>(yb + t * D, out);
      if (p.ret_final && t == L - 1) {
        S* fin = static_cast<S*>(seg.final_states);
#pragma unroll
        for (int e = 0; e < N; ++e) {
#pragma unroll
          for (int j = 0; j < W - 1; ++j) fin[(b * D + d0 + e) * (W - 1) + j] = win[i + 1 + j][e];
        }
      }
    }
  }
}

template <class T, int W>
__global__ void __launch_bounds__(kClCols * kClRows) fwd_cl_kernel(KParams p) {
  const int tx = threadIdx.x % kClCols;
  const int ty = threadIdx.x / kClCols;
  for (int64_t tile = blockIdx.x; tile < p.total_tiles; tile += gridDim.x) {
    const int s = find_segment(p.segs, p.nseg, tile);
    const Conv1dSegment& seg = p.segs[s];
    if (seg.vec) {
      fwd_cl_thread<T, 4, W>(p, seg, tile - seg.tile_begin, tx, ty);
    } else {
      fwd_cl_thread<T, 1, W>(p, seg, tile - seg.tile_begin, tx, ty);
    }
  }
}

template <class T>
hipError_t LaunchCf(const KParams& k, hipStream_t s) {
  const unsigned grid = GridFor((k.total_tiles + kTeamsPerBlock - 1) / kTeamsPerBlock);
  const unsigned block = kTeam * kTeamsPerBlock;
  switch (k.width) {
    case 2: fwd_cf_kernel<T, 2><<<grid, block, 0, s>>>(k); break;
    case 3: fwd_cf_kernel<T, 3><<<grid, block, 0, s>>>(k); break;
    case 4: fwd_cf_kernel<T, 4><<<grid, block, 0, s>>>(k); break;
    default: return hipErrorInvalidValue;
  }
  return hipGetLastError();
}

template <class T>
hipError_t LaunchCl(const KParams& k, hipStream_t s) {
  const unsigned grid = GridFor(k.total_tiles);
  const unsigned block = kClCols * kClRows;
  switch (k.width) {
    case 2: fwd_cl_kernel<T, 2><<<grid, block, 0, s>>>(k); break;
    case 3: fwd_cl_kernel<T, 3><<<grid, block, 0, s>>>(k); break;
    case 4: fwd_cl_kernel<T, 4><<<grid, block, 0, s>>>(k); break;
    default: return hipErrorInvalidValue;
  }
  return hipGetLastError();
}

}  // namespace

namespace detail {

int32_t LaunchFwdChannelFirst(const Conv1dProblem& p, const Conv1dPlanInfo& plan,
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

int32_t LaunchFwdChannelLast(const Conv1dProblem& p, const Conv1dPlanInfo& plan,
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
