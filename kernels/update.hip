// The decode update over a ragged segment table: the vector path
// (update_vec_kernel, one decode step with the minimal state, widths 2..8)
// and one thread per row for everything else (update_kernel, any width).
#include "kernels/conv1d_device.h"

namespace conv1d::kernels {
namespace {

using namespace dev;
using detail::WidthSwitch;
using detail::kGenBlock;
using detail::kUpdBlock;

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
// launch's width (2..8; other widths never take the vector path).
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
    const bool launched = WidthSwitch(k.width, [&](auto w) {
      update_vec_kernel<T, decltype(w)::value><<<grid, kUpdBlock, 0, s>>>(k);
    });
    if (!launched) return hipErrorInvalidValue;
  }
  return hipGetLastError();
}

}  // namespace

namespace detail {

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
