// General path (any width 1..64, both layouts) and the decode update, over a
// ragged segment table. One thread per element: correct for every width,
// not tuned (widths 2..4 take the fast kernels in conv1d_fwd/bwd.hip).
// Backward runs three launches: g into the workspace, then dx and
// dinitial_states, then a fixed-order block reduction for dweight/dbias.
#include "kernels/conv1d_device.h"

namespace conv1d::kernels {
namespace {

using namespace dev;
using detail::kGenBlock;
using detail::kUpdBlock;

// Element index within a segment, in memory order of the layout.
__device__ __forceinline__ int64_t elem_index(bool cl, int64_t b, int64_t d, int64_t t,
                                              int64_t D, int64_t L) {
  return cl ? (b * L + t) * D + d : (b * D + d) * L + t;
}

__device__ __forceinline__ void elem_coords(bool cl, int64_t u, int64_t D, int64_t L,
                                            int64_t* b, int64_t* d, int64_t* t) {
  if (cl) {
    *d = u % D;
    const int64_t r = u / D;
    *t = r % L;
    *b = r / L;
  } else {
    *t = u % L;
    const int64_t r = u / L;
    *d = r % D;
    *b = r / D;
  }
}

template <class T>
__device__ __forceinline__ float xt(const KParams& p, const Conv1dSegment& seg, int64_t b,
                                    int64_t d, int64_t t) {
  const int64_t D = p.dim;
  const int W = p.width;
  if (t >= 0) {
    return T::to_f(static_cast<const typename T::S*>(seg.in(Role::kX))[elem_index(p.layout == 1, b, d, t, D, seg.seqlen)]);
  }
  if (!p.has_init) return 0.0f;
  return T::to_f(static_cast<const typename T::S*>(seg.in(Role::kInitialStates))[(b * D + d) * (W - 1) + (W - 1) + t]);
}

template <class T>
__device__ __forceinline__ float z_at(const KParams& p, const Conv1dSegment& seg, int64_t b,
                                      int64_t d, int64_t t) {
  const int W = p.width;
  float z = p.has_bias ? load_any(seg.in(Role::kBias), d, p.wtype) : 0.0f;
  for (int k = 0; k < W; ++k) z += load_any(seg.in(Role::kWeight), d * W + k, p.wtype) * xt<T>(p, seg, b, d, t - (W - 1) + k);
  return z;
}

// Per segment: elements [0, B*D*L) are outputs, [B*D*L, B*D*(L+W-1)) the
// state slots (final_states forward, dinitial_states backward).
template <class T>
__global__ void __launch_bounds__(kGenBlock) gen_fwd_kernel(KParams p) {
  using S = typename T::S;
  const bool cl = p.layout == 1;
  const int W = p.width;
  for (int64_t tile = blockIdx.x; tile < p.total_tiles; tile += gridDim.x) {
    const int s = find_segment(p.segs, p.nseg, tile);
    const Conv1dSegment& seg = p.segs[s];
    const int64_t u = (tile - seg.tile_begin) * kGenBlock + threadIdx.x;
    const int64_t D = p.dim, L = seg.seqlen, n = seg.batch * D * L;
    if (u < n) {
      int64_t b, d, t;
      elem_coords(cl, u, D, L, &b, &d, &t);
      static_cast<S*>(seg.out(Role::kY))[u] = T::from_f(act_fwd(z_at<T>(p, seg, b, d, t), p.silu));
    } else if (p.ret_final && u < n + seg.batch * D * (W - 1)) {
      const int64_t v = u - n;
      const int64_t row = v / (W - 1), i = v % (W - 1);
      static_cast<S*>(seg.out(Role::kFinalStates))[v] = T::from_f(xt<T>(p, seg, row / D, row % D, L - (W - 1) + i));
    }
  }
}

template <class T>
__global__ void __launch_bounds__(kGenBlock) gen_bwd_g_kernel(KParams p) {
  using S = typename T::S;
  const bool cl = p.layout == 1;
  for (int64_t tile = blockIdx.x; tile < p.total_tiles; tile += gridDim.x) {
    const int s = find_segment(p.segs, p.nseg, tile);
    const Conv1dSegment& seg = p.segs[s];
    const int64_t u = (tile - seg.tile_begin) * kGenBlock + threadIdx.x;
    const int64_t D = p.dim, L = seg.seqlen;
    if (u < seg.batch * D * L) {
      float g = T::to_f(static_cast<const S*>(seg.in(Role::kDout))[u]);
      if (p.silu) {
        int64_t b, d, t;
        elem_coords(cl, u, D, L, &b, &d, &t);
        g *= silu_grad_f(z_at<T>(p, seg, b, d, t));
      }
      p.gbuf[seg.ws_grad_offset + u] = g;
    }
  }
}

__device__ __forceinline__ float g_of(const KParams& p, const Conv1dSegment& seg, int64_t b,
                                      int64_t d, int64_t t) {
  if (t < 0 || t >= seg.seqlen) return 0.0f;
  return p.gbuf[seg.ws_grad_offset + elem_index(p.layout == 1, b, d, t, p.dim, seg.seqlen)];
}

template <class T>
__global__ void __launch_bounds__(kGenBlock) gen_bwd_dx_kernel(KParams p) {
  using S = typename T::S;
  const bool cl = p.layout == 1;
  const int W = p.width;
  for (int64_t tile = blockIdx.x; tile < p.total_tiles; tile += gridDim.x) {
    const int s = find_segment(p.segs, p.nseg, tile);
    const Conv1dSegment& seg = p.segs[s];
    const int64_t u = (tile - seg.tile_begin) * kGenBlock + threadIdx.x;
    const int64_t D = p.dim, L = seg.seqlen, n = seg.batch * D * L;
    int64_t b, d, sidx;  // sidx: index into x̃
    if (u < n) {
      int64_t t;
      elem_coords(cl, u, D, L, &b, &d, &t);
      sidx = t + (W - 1);
    } else if (u < n + seg.batch * D * (W - 1)) {
      const int64_t row = (u - n) / (W - 1);
      b = row / D;
      d = row % D;
      sidx = (u - n) % (W - 1);
    } else {
      continue;
    }
    float acc = 0.0f;
    for (int k = 0; k < W; ++k) acc += load_any(seg.in(Role::kWeight), d * W + k, p.wtype) * g_of(p, seg, b, d, sidx - k);
    if (p.has_dfinal && sidx >= L) {
      acc += T::to_f(static_cast<const S*>(seg.in(Role::kDfinalStates))[(b * D + d) * (W - 1) + sidx - L]);
    }
    if (u < n) {
      static_cast<S*>(seg.out(Role::kDx))[u] = T::from_f(acc);
    } else if (p.ret_dinit) {
      static_cast<S*>(seg.out(Role::kDinitialStates))[u - n] = T::from_f(acc);
    }
  }
}

__device__ float block_sum(float v, float* sm) {
  sm[threadIdx.x] = v;
  __syncthreads();
  for (int h = kGenBlock / 2; h > 0; h >>= 1) {
    if (static_cast<int>(threadIdx.x) < h) sm[threadIdx.x] += sm[threadIdx.x + h];
    __syncthreads();
  }
  const float r = sm[0];
  __syncthreads();
  return r;
}

// One block per (segment, channel): dweight[d, :] and dbias[d].
template <class T>
__global__ void __launch_bounds__(kGenBlock) gen_bwd_dw_kernel(KParams p) {
  __shared__ float sm[kGenBlock];
  const int W = p.width;
  const int64_t D = p.dim;
  for (int64_t tile = blockIdx.x; tile < static_cast<int64_t>(p.nseg) * D; tile += gridDim.x) {
    const Conv1dSegment& seg = p.segs[tile / D];
    const int64_t d = tile % D;
    const int64_t L = seg.seqlen, n = seg.batch * L;
    for (int k = 0; k <= W; ++k) {
      float acc = 0.0f;
      for (int64_t i = threadIdx.x; i < n; i += kGenBlock) {
        const int64_t b = i / L, t = i % L;
        const float g = g_of(p, seg, b, d, t);
        acc += k < W ? g * xt<T>(p, seg, b, d, t - (W - 1) + k) : g;
      }
      acc = block_sum(acc, sm);
      if (threadIdx.x == 0) {
        if (k < W) store_any(seg.out(Role::kDweight), d * W + k, p.gwtype, acc);
        else if (p.has_bias) store_any(seg.out(Role::kDbias), d, p.gwtype, acc);
      }
    }
  }
}

// Decode update, vector path (seg.vec, set by the planner: seqlen 1,
// state_len W-1, D a multiple of R, every tensor 16-byte aligned), for the
// block's rows rb .. : a thread owns R = 16 bytes of x worth of consecutive
// rows (one channel group of one batch row), so x, y, the weights and the
// bias move as whole 16-byte vectors. The state (K = W-1 vectors per
// thread) moves between global and shared memory in coalesced 16-byte
// accesses of the whole block, loaded together with the rest and stored
// after everything is read (in-place is safe). Called by every thread of
// the block (barriers).
template <class T, int W>
__device__ __forceinline__ void update_rows_vec(const KParams& p, const Conv1dSegment& seg,
                                                int64_t rb, uint4* sstate) {
  using S = typename T::S;
  constexpr int R = kVecElts<T>;
  constexpr int K = W - 1;
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t left = (seg.batch * p.dim - rb) / R;  // threads with rows
  const int nq = static_cast<int>(left < kUpdBlock ? left : kUpdBlock) * K;
  const bool on = tid * K < nq;
  const uint4* gsrc = reinterpret_cast<const uint4*>(static_cast<const S*>(seg.in(Role::kConvState)) + rb * K);
  uint4 q[K];
#pragma unroll
  for (int j = 0; j < K; ++j) {
    const int i = j * kUpdBlock + tid;
    if (i < nq) q[j] = gsrc[i];
  }
  const int64_t r0 = rb + static_cast<int64_t>(tid) * R;
  const int64_t d0 = mod_fast(on ? r0 : rb, p.dim);
  S xs[R];
  float w[R * W], bias[R];
#pragma unroll
  for (int e = 0; e < R; ++e) bias[e] = 0.0f;
  if (on) {
    load_raw<T, R>(static_cast<const S*>(seg.in(Role::kX)) + r0, xs);
    if (p.wtype == 0) {
      const float* wp = static_cast<const float*>(seg.in(Role::kWeight)) + d0 * W;
#pragma unroll
      for (int i = 0; i < R * W / 4; ++i) {
        float f4[4];
        load_f<F32, 4>(wp + 4 * i, f4);
#pragma unroll
        for (int e = 0; e < 4; ++e) w[4 * i + e] = f4[e];
      }
      if (p.has_bias) {
#pragma unroll
        for (int i = 0; i < R / 4; ++i) {
          float f4[4];
          load_f<F32, 4>(static_cast<const float*>(seg.in(Role::kBias)) + d0 + 4 * i, f4);
#pragma unroll
          for (int e = 0; e < 4; ++e) bias[4 * i + e] = f4[e];
        }
      }
    } else {
      // Weights in the activation type (the only other legal weight type).
      const S* wp = static_cast<const S*>(seg.in(Role::kWeight)) + d0 * W;
#pragma unroll
      for (int i = 0; i < W; ++i) {
        float fr[R];
        load_f<T, R>(wp + R * i, fr);
#pragma unroll
        for (int e = 0; e < R; ++e) w[R * i + e] = fr[e];
      }
      if (p.has_bias) load_f<T, R>(static_cast<const S*>(seg.in(Role::kBias)) + d0, bias);
    }
  }
#pragma unroll
  for (int j = 0; j < K; ++j) {
    const int i = j * kUpdBlock + tid;
    if (i < nq) sstate[i] = q[j];
  }
  __syncthreads();
  if (on) {
    S st[K * R];  // row j's state is st[j*K .. j*K+K-1]
#pragma unroll
    for (int j = 0; j < K; ++j) q[j] = sstate[tid * K + j];
    __builtin_memcpy(st, q, sizeof(st));
    float out[R];
    S ns[K * R];
#pragma unroll
    for (int j = 0; j < R; ++j) {
      float z = bias[j];
#pragma unroll
      for (int k = 0; k < K; ++k) z += w[j * W + k] * T::to_f(st[j * K + k]);
      z += w[j * W + K] * T::to_f(xs[j]);
      out[j] = act_fwd(z, p.silu);
#pragma unroll
      for (int i = 0; i < K; ++i) ns[j * K + i] = i + 1 < K ? st[j * K + i + 1] : xs[j];
    }
    store_f<T, R>(static_cast<S*>(seg.out(Role::kY)) + r0, out);
    __builtin_memcpy(q, ns, sizeof(ns));
#pragma unroll
    for (int j = 0; j < K; ++j) sstate[tid * K + j] = q[j];
  }
  __syncthreads();
  uint4* gdst = reinterpret_cast<uint4*>(static_cast<S*>(seg.out(Role::kConvStateOut)) + rb * K);
#pragma unroll
  for (int j = 0; j < K; ++j) {
    const int i = j * kUpdBlock + tid;
    if (i < nq) gdst[i] = sstate[i];
  }
  __syncthreads();  // sstate is reused by the block's next tile
}

// Decode update, vector-path tiles (the plan's stream range): kW is the
// launch's width (2..4; other widths never take the vector path).
template <class T, int kW>
__global__ void __launch_bounds__(kUpdBlock) update_vec_kernel(KParams p) {
  // The block's state, K vectors per thread in memory order.
  __shared__ uint4 sstate[(kW - 1) * kUpdBlock];
  for (int64_t tile = p.tile_begin + blockIdx.x; tile < p.total_tiles; tile += gridDim.x) {
    const Conv1dSegment& seg = p.segs[find_segment(p.segs, p.nseg, tile)];
    if (!seg.vec) continue;  // uniform over the block
    update_rows_vec<T, kW>(p, seg, (tile - seg.tile_begin) * kUpdBlock * kVecElts<T>, sstate);
  }
}

// Decode update, other tiles (up to the end of the plan's long range): one
// thread per (segment, b, d) row. c = concat(state, x) of length K+S; y[s] uses
// c[K+s-(W-1) .. K+s]; the new state is the last K of c, written in
// increasing order after y so that in-place is safe.
template <class T>
__global__ void __launch_bounds__(kGenBlock) update_kernel(KParams p) {
  using S = typename T::S;
  const bool cl = p.layout == 1;
  const int W = p.width;
  for (int64_t tile = blockIdx.x; tile < p.total_tiles; tile += gridDim.x) {
    const int s = find_segment(p.segs, p.nseg, tile);
    const Conv1dSegment& seg = p.segs[s];
    const int64_t row = (tile - seg.tile_begin) * kGenBlock + threadIdx.x;
    const int64_t D = p.dim, Sn = seg.seqlen, K = seg.state_len;
    if (seg.vec || row >= seg.batch * D) continue;
    const int64_t b = row / D, d = row % D;
    const S* st = static_cast<const S*>(seg.in(Role::kConvState)) + row * K;
    const S* x = static_cast<const S*>(seg.in(Role::kX));
    S* y = static_cast<S*>(seg.out(Role::kY));
    const float bias = p.has_bias ? load_any(seg.in(Role::kBias), d, p.wtype) : 0.0f;
    auto c = [&](int64_t i) -> S { return i < K ? st[i] : x[elem_index(cl, b, d, i - K, D, Sn)]; };
    for (int64_t t = 0; t < Sn; ++t) {
      float z = bias;
      for (int k = 0; k < W; ++k) z += load_any(seg.in(Role::kWeight), d * W + k, p.wtype) * T::to_f(c(K + t - (W - 1) + k));
      y[elem_index(cl, b, d, t, D, Sn)] = T::from_f(act_fwd(z, p.silu));
    }
    S* out = static_cast<S*>(seg.out(Role::kConvStateOut)) + row * K;
    for (int64_t j = 0; j < K; ++j) out[j] = c(Sn + j);
  }
}

template <class T>
hipError_t LaunchGen(const KParams& k, bool backward, hipStream_t s) {
  const unsigned grid = GridFor(k.total_tiles);
  if (!backward) {
    gen_fwd_kernel<T><<<grid, kGenBlock, 0, s>>>(k);
    return hipGetLastError();
  }
  gen_bwd_g_kernel<T><<<grid, kGenBlock, 0, s>>>(k);
  gen_bwd_dx_kernel<T><<<grid, kGenBlock, 0, s>>>(k);
  gen_bwd_dw_kernel<T><<<GridFor(static_cast<int64_t>(k.nseg) * k.dim), kGenBlock, 0, s>>>(k);
  return hipGetLastError();
}

template <class T>
hipError_t LaunchUpd(const KParams& k0, const Conv1dPlanInfo& plan, hipStream_t s) {
  KParams k = k0;
  if (plan.long_tile_end > plan.long_tile_begin) {
    k.total_tiles = plan.long_tile_end;
    update_kernel<T><<<GridFor(k.total_tiles), kGenBlock, 0, s>>>(k);
  }
  if (plan.stream_tile_end > plan.stream_tile_begin) {
    k.tile_begin = plan.stream_tile_begin;
    k.total_tiles = plan.stream_tile_end;
    const unsigned grid = GridFor(k.total_tiles - k.tile_begin);
    switch (k.width) {
      case 2: update_vec_kernel<T, 2><<<grid, kUpdBlock, 0, s>>>(k); break;
      case 3: update_vec_kernel<T, 3><<<grid, kUpdBlock, 0, s>>>(k); break;
      default: update_vec_kernel<T, 4><<<grid, kUpdBlock, 0, s>>>(k); break;
    }
  }
  return hipGetLastError();
}

}  // namespace

namespace detail {

int32_t LaunchGeneral(const Conv1dProblem& p, const Conv1dPlanInfo& plan,
                      const Conv1dSegment* segs, void* ws, Stream s) {
  const KParams k = MakeParams(p, plan, segs, ws);
  const auto st = static_cast<hipStream_t>(s);
  const bool bwd = p.op == KernelOp::kBackward;
  switch (p.x_type) {
    case ScalarType::kF32: return LaunchGen<F32>(k, bwd, st);
    case ScalarType::kF16: return LaunchGen<F16>(k, bwd, st);
    case ScalarType::kBF16: return LaunchGen<BF16>(k, bwd, st);
  }
  return hipErrorInvalidValue;
}

int32_t LaunchUpdate(const Conv1dProblem& p, const Conv1dPlanInfo& plan,
                     const Conv1dSegment* segs, void* ws, Stream s) {
  const KParams k = MakeParams(p, plan, segs, ws);
  const auto st = static_cast<hipStream_t>(s);
  switch (p.x_type) {
    case ScalarType::kF32: return LaunchUpd<F32>(k, plan, st);
    case ScalarType::kF16: return LaunchUpd<F16>(k, plan, st);
    case ScalarType::kBF16: return LaunchUpd<BF16>(k, plan, st);
  }
  return hipErrorInvalidValue;
}

}  // namespace detail
}  // namespace conv1d::kernels
