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
using detail::kTeam;
using detail::kTeamsPerBlock;

template <class T, int W>
__device__ __forceinline__ void write_final_cf(const KParams& p, const Conv1dSegment& seg,
                                               const typename T::S* xrow, int64_t row) {
  using S = typename T::S;
  const int64_t L = seg.seqlen;
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

// A team owns kMax vector slots per lane: either `per_lane` consecutive
// vectors of one row chunk, or (short rows, rows_per_tile > 1) one vector of
// each of several rows. Every load (vectors, halos, weights) is issued
// before the first use.
template <class T, int N, int W>
__device__ __forceinline__ void fwd_cf_team(const KParams& p, const Conv1dSegment& seg,
                                            int64_t local, int lane) {
  using S = typename T::S;
  constexpr int kMax = detail::kMaxPerLaneFwd;
  const int64_t L = seg.seqlen;
  const int V = seg.per_lane;
  const bool multi = seg.rows_per_tile > 1;
  const int64_t nchunks = seg.nchunks;
  const int64_t nrows = seg.batch * p.dim;
  const int64_t row0 = multi ? local * seg.rows_per_tile : local / nchunks;
  const int64_t chunk = multi ? 0 : local - row0 * nchunks;
  const int64_t c0 = chunk * static_cast<int64_t>(kTeam * V * N);
  const S* x = static_cast<const S*>(seg.x);

  int64_t row[kMax], pos[kMax];
  bool on[kMax];
  const int lpr = seg.lanes_per_row;  // multi: lanes per row, rows per slot = kTeam / lpr
  const int rps = kTeam / lpr;
#pragma unroll
  for (int j = 0; j < kMax; ++j) {
    row[j] = multi ? row0 + j * rps + lane / lpr : row0;
    pos[j] = multi ? static_cast<int64_t>(lane % lpr) * N : c0 + static_cast<int64_t>(j * kTeam + lane) * N;
    on[j] = (multi ? row[j] < nrows : j < V) && pos[j] < L;
  }
  float xv[kMax][N], hist[kMax][W - 1];
#pragma unroll
  for (int j = 0; j < kMax; ++j) {
    if (on[j]) {
      load_f<T, N>(x + row[j] * L + pos[j], xv[j]);
      load_left<T, N, W>(p, seg, x + row[j] * L, row[j], pos[j], hist[j]);
    }
  }
  float w[kMax][W], bias[kMax];
#pragma unroll
  for (int j = 0; j < kMax; ++j) {
    if (j == 0 || multi) {
      const int64_t d = row[j] % p.dim;
#pragma unroll
      for (int k = 0; k < W; ++k) w[j][k] = load_any(seg.weight, d * W + k, p.wtype);
      bias[j] = p.has_bias ? load_any(seg.bias, d, p.wtype) : 0.0f;
    } else {
#pragma unroll
      for (int k = 0; k < W; ++k) w[j][k] = w[0][k];
      bias[j] = bias[0];
    }
  }
#pragma unroll
  for (int j = 0; j < kMax; ++j) {
    if (on[j]) {
      float out[N];
#pragma unroll
      for (int e = 0; e < N; ++e) {
        float z = bias[j];
#pragma unroll
        for (int k = 0; k < W; ++k) {
          const int idx = e + k - (W - 1);
          z += w[j][k] * (idx >= 0 ? xv[j][idx >= 0 ? idx : 0] : hist[j][idx < 0 ? W - 1 + idx : 0]);
        }
        out[e] = act_fwd(z, p.silu);
      }
      store_f<T, N>(static_cast<S*>(seg.y) + row[j] * L + pos[j], out);
    }
  }
  if (p.ret_final) {
#pragma unroll
    for (int j = 0; j < kMax; ++j) {
      const bool rowv = multi ? (lane % lpr == 0 && row[j] < nrows)
                              : (lane == 0 && j == 0 && chunk == nchunks - 1);
      if (rowv) write_final_cf<T, W>(p, seg, x + row[j] * L, row[j]);
    }
  }
}

template <class T, int W>
__global__ void __launch_bounds__(kTeam * kTeamsPerBlock, 2) fwd_cf_kernel(KParams p) {
  const int lane = threadIdx.x % kTeam;
  const int team = threadIdx.x / kTeam;
  for (int64_t blk = blockIdx.x; blk * kTeamsPerBlock < p.total_tiles; blk += gridDim.x) {
    const int64_t tile = blk * kTeamsPerBlock + team;
    if (tile >= p.total_tiles) continue;
    const Conv1dSegment seg = p.segs[find_segment(p.segs, p.nseg, tile)];
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
__global__ void __launch_bounds__(kClCols * kClRows, 2) fwd_cl_kernel(KParams p) {
  const int tx = threadIdx.x % kClCols;
  const int ty = threadIdx.x / kClCols;
  for (int64_t tile = blockIdx.x; tile < p.total_tiles; tile += gridDim.x) {
    const Conv1dSegment seg = p.segs[find_segment(p.segs, p.nseg, tile)];
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
