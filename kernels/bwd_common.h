// Device pieces shared by the backward kernel families (kernels/bwd_*.hip):
// the gradient through the activation, the masks of a vector at a row's
// ends, and each family's launcher. A family launcher launches
// its kernel over the tiles [k.tile_begin, k.total_tiles) of the planned
// table on stream s and returns the launch error; bwd_launch.hip picks the
// families of a launch.
//
// Used by kernels/bwd_*.hip only. Device functions; no state.
#ifndef CONV1D_KERNELS_BWD_COMMON_H_
#define CONV1D_KERNELS_BWD_COMMON_H_

#include "kernels/conv1d_device.h"

namespace conv1d::kernels::dev {

using detail::kTeam;

__device__ __forceinline__ float grad_of(float dout, float z, bool silu) {
  return silu ? silu_backward_f(dout, z) : dout;
}

// A row's dinitial_states from g at t = 0 .. W-2 (g[0 .. W-2]): the
// initial state's element i reaches the outputs at t <= i through weights
// k <= i, so dinit[i] = sum over k <= i of w[k] g[i - k]. Callers add no
// dfinal_states term: their rows are longer than the state.
template <class T, int W>
__device__ __forceinline__ void store_dinit_row(typename T::S* dinit, const float (&w)[W],
                                                const float* g) {
#pragma unroll
  for (int i = 0; i < W - 1; ++i) {
    float acc = 0.0f;
#pragma unroll
    for (int k = 0; k <= i; ++k) acc += w[k] * g[i - k];
    dinit[i] = T::from_f(acc);
  }
}

// A channel's dweight/dbias (v[W] the bias) stored by the kernel that
// summed all of it (the walk; the stream backward's kWsDirect rows): 0 +
// sum, the bytes reduce_dw_kernel stores from a single partial.
template <int W>
__device__ __forceinline__ void store_channel_dw(const KParams& p, const Conv1dSegment& seg,
                                                 int64_t d, const float (&v)[W + 1]) {
#pragma unroll
  for (int k = 0; k < W; ++k) store_any(seg.out(Role::kDweight), d * W + k, p.gwtype, 0.0f + v[k]);
  if (p.has_bias) store_any(seg.out(Role::kDbias), d, p.gwtype, 0.0f + v[W]);
}

// The dx of a lane's element e from g: the sum over taps k of w[k] times g
// at e + W-1-k, from the lane's own vector g (N elements) or, past it,
// its right halo gn (g at the next W-1 positions). e is a compile-time
// index once the caller's loop is unrolled.
template <int W, int N>
__device__ __forceinline__ float dx_of_g(const float (&w)[W], const float (&g)[N],
                                         const float (&gn)[W - 1], int e) {
  float acc = 0.0f;
#pragma unroll
  for (int k = 0; k < W; ++k) {
    const int idx = e + (W - 1) - k;
    acc += w[k] * (idx < N ? g[idx < N ? idx : 0] : gn[idx >= N ? idx - N : 0]);
  }
  return acc;
}

// out = the kOut values at positions sh .. sh+kOut-1 of a followed by b
// (0 <= sh < kA; zeros past the end), by a barrel shift of conditional
// moves: a run-time index into a register array would put the arrays in
// local memory. The dinitial_states of a shifted row use it (g at t = 0
// lies sh elements into the lane's vector).
template <int kA, int kB, int kOut>
__device__ __forceinline__ void window_at(const float (&a)[kA], const float (&b)[kB], int sh,
                                          float (&out)[kOut]) {
  constexpr int kN = kA + kB;
  float v[kN];
#pragma unroll
  for (int i = 0; i < kA; ++i) v[i] = a[i];
#pragma unroll
  for (int i = 0; i < kB; ++i) v[kA + i] = b[i];
#pragma unroll
  for (int bit = 1; bit < kA; bit <<= 1) {
    const bool on = (sh & bit) != 0;
#pragma unroll
    for (int i = 0; i < kN; ++i) {
      const float next = i + bit < kN ? v[i + bit < kN ? i + bit : 0] : 0.0f;
      v[i] = on ? next : v[i];
    }
  }
#pragma unroll
  for (int i = 0; i < kOut; ++i) out[i] = i < kN ? v[i < kN ? i : 0] : 0.0f;
}

// One lane's dx vector (dxv: row positions t0 .. t0+N-1 of row `row`, of
// length L) into dst: one 16-byte store when `inside` (the caller knows the
// vector lies inside the row and clear of dfinal_states) or when its
// positions say so; else element by element, inside the row only, with
// dfinal_states added to the row's last W-1 elements. The stream and walk
// backwards' vectors that straddle a row's ends take the second way.
template <class T, int W, int N>
__device__ __forceinline__ void store_dx_vector(const KParams& p, const Conv1dSegment& seg,
                                                int64_t row, int64_t L, int64_t t0, bool inside,
                                                const float (&dxv)[N], typename T::S* dst) {
  constexpr int kH = W - 1;
  if (inside || (t0 >= 0 && t0 + N <= L - (p.has_dfinal ? kH : 0))) {
    store_words(dst, pack_words<T>(dxv));
    return;
  }
  const typename T::S* dfin = static_cast<const typename T::S*>(seg.in(Role::kDfinalStates)) + row * kH;
#pragma unroll
  for (int e = 0; e < N; ++e) {
    const int64_t t = t0 + e;
    if (t >= 0 && t < L) {
      float v = dxv[e];
      if (p.has_dfinal && t >= L - kH) v += T::to_f(dfin[t - (L - kH)]);
      dst[e] = T::from_f(v);
    }
  }
}

// A vector of a shifted row at row position t0 (positions t0 .. t0+N-1)
// that straddles the row's ends, or lies past it: dout outside the row
// becomes zero (so g is zero there and adds to neither dx nor dweight), x
// before the row x̃ (initial state or zero) and past it zero. xf holds the
// vector's x from element kOff on.
template <class T, int N, int kOff, int kM>
__device__ __forceinline__ void mask_outside_row(const KParams& p, const Conv1dSegment& seg,
                                                 const typename T::S* xrow, int64_t row,
                                                 int64_t t0, int64_t L, int W, float (&dv)[N],
                                                 float (&xf)[kM]) {
  static_assert(kOff + N <= kM, "the vector lies inside xf");
  if (t0 >= 0 && t0 + N <= L) return;
#pragma unroll
  for (int e = 0; e < N; ++e) {
    const int64_t t = t0 + e;
    if (t < 0 || t >= L) {
      dv[e] = 0.0f;
      xf[kOff + e] = t < 0 ? x_tilde_cf<T>(p, seg, xrow, row, t, W) : 0.0f;
    }
  }
}

template <class T>
hipError_t LaunchBwdCfLong(const KParams& k, hipStream_t s);    // bwd_cf_long.hip
template <class T>
hipError_t LaunchBwdCfShort(const KParams& k, hipStream_t s);   // bwd_cf_short.hip
template <class T>
hipError_t LaunchBwdCfRun(const KParams& k, hipStream_t s);     // bwd_cf_run.hip
// bwd_cf_stream.h; one source per type (bwd_cf_stream_{f32,f16,bf16}.hip).
template <class T>
hipError_t LaunchBwdCfStream(const KParams& k, hipStream_t s);
template <>
hipError_t LaunchBwdCfStream<F32>(const KParams& k, hipStream_t s);
template <>
hipError_t LaunchBwdCfStream<F16>(const KParams& k, hipStream_t s);
template <>
hipError_t LaunchBwdCfStream<BF16>(const KParams& k, hipStream_t s);
template <class T>
hipError_t LaunchBwdCfWalk(const KParams& k, hipStream_t s);    // bwd_cf_walk.hip
template <class T>
hipError_t LaunchBwdCl(const KParams& k, hipStream_t s);        // bwd_cl.hip
template <class T>
int BwdClBlocksPerSm(int width);  // bwd_cl.hip: 0 when unknown
// dweight/dbias from the partials of every segment (reduce_dw.hip);
// max_partials: Conv1dPlanInfo::max_partials.
hipError_t LaunchReduceDw(const KParams& k, int64_t max_partials, hipStream_t s);

}  // namespace conv1d::kernels::dev

#endif  // CONV1D_KERNELS_BWD_COMMON_H_
