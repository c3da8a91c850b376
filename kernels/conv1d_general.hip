// General path (any width 1..kMaxKernelWidth, both layouts) over a ragged
// segment table. One thread per element: correct for every width, not
// tuned (widths 2..8 take the fast kernels, kernels/fwd_* and bwd_*).
// Backward runs three launches: g into the workspace, then dx and
// dinitial_states, then a fixed-order block reduction for dweight/dbias.
#include "kernels/conv1d_device.h"

namespace conv1d::kernels {
namespace {

using namespace dev;
using detail::kGenBlock;

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

}  // namespace detail
}  // namespace conv1d::kernels
