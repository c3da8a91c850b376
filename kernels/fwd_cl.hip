// Forward, channel-last (fwd_cl_kernel): thread (tx, ty) of a tile streams
// a time chunk of a channel vector through a shared-memory ring of
// asynchronous copies (fwd_cl_ring), or on the scalar path of one channel
// with a register window (fwd_cl_thread).
#include "kernels/fwd_common.h"

namespace conv1d::kernels::dev {
namespace {

using detail::kClCols;
using detail::kClRows;
using detail::kTeam;
using detail::kTeamsPerBlock;
using detail::WidthSwitch;

// Steps a thread walks: the planner's (ClFwdSteps, in seg.per_lane) in
// 16-bit types; fp32 always takes the default, as a constant (the planned
// count cost the fp32 kernel a point of a copy on 4x2048x2048, H200).
template <class S>
__device__ __forceinline__ int ClFwdThreadSteps(const Conv1dSegment& seg) {
  if constexpr (sizeof(S) == 4) return detail::ClStepsFwd(4);
  else return seg.per_lane;
}

// Channel-last scalar path: thread (tx, ty) of tile (b, time block, channel
// block) owns channel d0 and time steps t0 .. t0+steps-1
// (ClFwdThreadSteps), in sub-chunks of kSub steps.
template <class T, int W, int kSub>
__device__ __forceinline__ void fwd_cl_thread(const KParams& p, const Conv1dSegment& seg,
                                              int64_t local, int tx, int ty) {
  using S = typename T::S;
  constexpr int N = 1;  // channels per thread
  const int64_t steps = ClFwdThreadSteps<S>(seg);
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
  const int64_t t0 = (tb * kClRows + ty) * steps;
  if (dv >= nD || t0 >= L) return;
  const int64_t d0 = dv * N;
  const S* xb = static_cast<const S*>(seg.in(Role::kX)) + b * L * D + d0;
  S* yb = static_cast<S*>(seg.out(Role::kY)) + b * L * D + d0;

  // Sub-chunks of kSub steps, all loads of one issued at once.
  auto sub = [&](int64_t ts) {
    S win[kSub + W - 1][N];  // x̃ at ts-(W-1) .. ts+kSub-1
#pragma unroll
    for (int i = 0; i < W - 1; ++i) {
      const int64_t t = ts - (W - 1) + i;
      if (t >= 0) {
        load_raw<T, N>(xb + t * D, win[i]);
      } else {
#pragma unroll
        for (int e = 0; e < N; ++e) {
          win[i][e] = p.has_init ? static_cast<const S*>(seg.in(Role::kInitialStates))
                                       [(b * D + d0 + e) * (W - 1) + (W - 1) + t]
                                 : T::from_f(0.0f);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kSub; ++i) {
      const int64_t t = ts + i;
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
      for (int k = 0; k < W; ++k) w[e][k] = load_any(seg.in(Role::kWeight), (d0 + e) * W + k, p.wtype);
      bias[e] = p.has_bias ? load_any(seg.in(Role::kBias), d0 + e, p.wtype) : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < kSub; ++i) {
      const int64_t t = ts + i;
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
          S* fin = static_cast<S*>(seg.out(Role::kFinalStates));
#pragma unroll
          for (int e = 0; e < N; ++e) {
#pragma unroll
            for (int j = 0; j < W - 1; ++j) fin[(b * D + d0 + e) * (W - 1) + j] = win[i + 1 + j][e];
          }
        }
      }
    }
  };
#pragma unroll 1
  for (int64_t ts = t0; ts < t0 + steps && ts < L; ts += kSub) sub(ts);
}

// Channel-last, vector path (16-bit: 8-byte vectors, fp32: 16-byte): the
// chunk of fwd_cl_thread walked one step at a time, x of the next kP steps
// in flight as asynchronous copies into this thread's slots of a
// shared-memory ring (`ring`: slot s, thread th at ring[s * threads + th]),
// the last W-1 x̃ carried in registers.
template <class T, int N, int W, bool kSilu>
__device__ __forceinline__ void fwd_cl_ring(const KParams& p, const Conv1dSegment& seg,
                                            int64_t local, int tx, int ty, void* ring_mem) {
  using S = typename T::S;
  const int steps = ClFwdThreadSteps<S>(seg);
  constexpr int kP = detail::FwdClTraits<sizeof(S), W>::kPrefetch;
  constexpr int kSlots = kP + 1;
  constexpr int kVB = N * static_cast<int>(sizeof(S));
  static_assert(kVB == 16 || kVB == 8, "8- or 16-byte vectors");
  using V = typename std::conditional<kVB == 16, uint4, uint2>::type;
  constexpr int kThreads = kClCols * kClRows;
  V* ring = static_cast<V*>(ring_mem);
  const int th = ty * kClCols + tx;
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
  const int64_t t0 = (tb * kClRows + ty) * static_cast<int64_t>(steps);
  if (dv >= nD || t0 >= L) return;
  const int64_t d0 = dv * N;
  const S* xb = static_cast<const S*>(seg.in(Role::kX)) + b * L * D + d0;
  S* yt = static_cast<S*>(seg.out(Role::kY)) + b * L * D + d0 + t0 * D;
  const int64_t left = L - t0;
  const int nsteps = left >= steps ? steps : static_cast<int>(left);
  const S* xi = xb + t0 * D;
  int ni = 0;
  auto issue = [&](int slot) {
    if (ni < nsteps) {
      if constexpr (kVB == 16) copy16_async(&ring[slot * kThreads + th], xi, 16);
      else copy8_async(&ring[slot * kThreads + th], xi, 8);
    }
    copy_async_commit();
    xi += D;
    ++ni;
  };
#pragma unroll
  for (int q = 0; q < kP; ++q) issue(q);

  float xw[W - 1][N];  // x̃ at t-(W-1) .. t-1 for the next step t
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
  }
  float w[N][W];
  float bias[N];
#pragma unroll
  for (int e = 0; e < N; ++e) {
#pragma unroll
    for (int k = 0; k < W; ++k) w[e][k] = load_any(seg.in(Role::kWeight), (d0 + e) * W + k, p.wtype);
    bias[e] = p.has_bias ? load_any(seg.in(Role::kBias), d0 + e, p.wtype) : 0.0f;
  }
  // Only the chunk holding t = L-1 writes final states.
  const bool fin_here = p.ret_final && L - t0 <= steps;
  int rd = 0, wr = kP;  // slots of the step to compute and of the next issue
  auto step = [&]() {
    copy_async_wait<kP - 1>();  // this step's group has landed
    const V xr = ring[rd * kThreads + th];
    issue(wr);
    rd = rd + 1 == kSlots ? 0 : rd + 1;
    wr = wr + 1 == kSlots ? 0 : wr + 1;
    float xv[N];
    {
      S xs[N];
      __builtin_memcpy(xs, &xr, kVB);
      unpack_f<T, N>(xs, xv);
    }
    float out[N];
#pragma unroll
    for (int e = 0; e < N; ++e) {
      float z = bias[e];
#pragma unroll
      for (int k = 0; k < W - 1; ++k) z += w[e][k] * xw[k][e];
      z += w[e][W - 1] * xv[e];
      out[e] = kSilu ? silu_f(z) : z;
#pragma unroll
      for (int k = 0; k < W - 2; ++k) xw[k][e] = xw[k + 1][e];
      xw[W - 2][e] = xv[e];
    }
    store_f<T, N>(yt, out);
    yt += D;
  };
  // W-1 steps per iteration: the x̃ window comes back to the same
  // registers, so shifting it costs no moves.
  constexpr int kU = W - 1;
  int i = 0;
  if constexpr (detail::FwdClTraits<sizeof(S), W>::kRotate && kU > 1) {
#pragma unroll 1
    for (; i + kU <= nsteps; i += kU) {
#pragma unroll
      for (int q = 0; q < kU; ++q) step();
    }
  }
#pragma unroll 1
  for (; i < nsteps; ++i) step();
  copy_async_wait<0>();
  if (fin_here) {
    // xw holds x̃ at L-(W-1) .. L-1.
    S* fin = static_cast<S*>(seg.out(Role::kFinalStates));
#pragma unroll
    for (int e = 0; e < N; ++e) {
#pragma unroll
      for (int j = 0; j < W - 1; ++j) fin[(b * D + d0 + e) * (W - 1) + j] = T::from_f(xw[j][e]);
    }
  }
}

template <class T, int W>
__global__ void __launch_bounds__(kClCols * kClRows, (detail::FwdClTraits<sizeof(typename T::S), W>::kMinBlocks))
    fwd_cl_kernel(KParams p) {
  using S = typename T::S;
  constexpr int N = detail::ClVecFwd(sizeof(S));
  constexpr int kRingBytes =
      (detail::FwdClTraits<sizeof(S), W>::kPrefetch + 1) * kClCols * kClRows * N * static_cast<int>(sizeof(S));
  __shared__ uint4 ring[kRingBytes / 16];
  const int tx = threadIdx.x % kClCols;
  const int ty = threadIdx.x / kClCols;
  for (int64_t tile = blockIdx.x; tile < p.total_tiles; tile += gridDim.x) {
    const Conv1dSegment seg = p.segs[find_tile_segment(p, tile, tx)];
    if (seg.vec) {
      BoolSwitch(p.silu, [&](auto silu) {
        fwd_cl_ring<T, N, W, decltype(silu)::value>(p, seg, tile - seg.tile_begin, tx, ty, ring);
      });
    } else {
      fwd_cl_thread<T, W, 8>(p, seg, tile - seg.tile_begin, tx, ty);  // windows of 8 steps
    }
  }
}


}  // namespace

template <class T>
hipError_t LaunchFwdCl(const KParams& k, hipStream_t s) {
  const unsigned grid = GridFor(k.total_tiles);
  const bool launched = WidthSwitch(k.width, [&](auto w) {
    fwd_cl_kernel<T, decltype(w)::value><<<grid, kClCols * kClRows, 0, s>>>(k);
  });
  return launched ? hipGetLastError() : hipErrorInvalidValue;
}

template <class T>
int FwdClBlocksPerSm(int width) {
  int n = 0;
  WidthSwitch(width, [&](auto w) { n = BlocksPerSm(fwd_cl_kernel<T, decltype(w)::value>, kClCols * kClRows); });
  return n;
}

template int FwdClBlocksPerSm<F32>(int);
template int FwdClBlocksPerSm<F16>(int);
template int FwdClBlocksPerSm<BF16>(int);

template hipError_t LaunchFwdCl<F32>(const KParams&, hipStream_t);
template hipError_t LaunchFwdCl<F16>(const KParams&, hipStream_t);
template hipError_t LaunchFwdCl<BF16>(const KParams&, hipStream_t);

}  // namespace conv1d::kernels::dev
