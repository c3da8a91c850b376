// Backward, channel-last (bwd_cl_kernel): a block of kClCols x kClRows
// threads per tile; the vector path streams x and dout through a
// shared-memory ring (bwd_cl_ring), the scalar path loads groups of steps
// into registers (bwd_cl_block, in bwd_cl_block.h). dweight/dbias go to
// partials (store_cl_partials), which reduce_dw_kernel sums after it, or,
// when the launch is one wave, the kernel itself after a grid barrier
// (KParams::fused_reduce).
#include "kernels/bwd_cl_block.h"
#include "kernels/reduce_dw.h"

namespace conv1d::kernels::dev {
namespace {

using detail::kClCols;
using detail::kClRows;
using detail::kTeam;
using detail::kTeamsPerBlock;
using detail::WidthSwitch;

// Channel-last vector path: the walk of bwd_cl_block (N = kClVecBwd), with
// the x and dout vectors of the next kP steps in flight as asynchronous
// copies into this thread's slots of a shared-memory ring (`ring`: slot s,
// x (0) or dout (1), thread th at ring[(2 s + kind) * threads + th]), so
// that they hold no registers. `red` aliases the ring.
template <class T, int W, bool kSilu>
__device__ __forceinline__ void bwd_cl_ring(const KParams& p, const Conv1dSegment& seg,
                                            int64_t local, int tx, int ty, void* ring_mem,
                                            float* red) {
  using S = typename T::S;
  constexpr int N = detail::kClVecBwd;
  constexpr int kSteps = detail::kClStepsBwd;
  constexpr int kP = detail::ClBwdPrefetch(sizeof(S));
  constexpr int kSlots = kP + 1;
  constexpr int kVB = N * static_cast<int>(sizeof(S));
  static_assert(kVB == 16 || kVB == 8, "8- or 16-byte vectors");
  using V = typename std::conditional<kVB == 16, uint4, uint2>::type;
  constexpr int kThreads = kClCols * kClRows;
  V* ring = static_cast<V*>(ring_mem);
  const int th = ty * kClCols + tx;
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
    // Steps i < nstep of the walk: t = t0 + i; g summed for i < nsum, the
    // W-1 after them are the right halo (dx of the last positions, dfinal).
    // Steps i < nload lie below L (their vectors are loaded, the rest read
    // zeros).
    const int64_t left = L - t0;
    const int nsum = left >= kSteps ? kSteps : static_cast<int>(left);
    const int nstep = nsum + W - 1;
    const int nload = left >= nstep ? nstep : static_cast<int>(left);
    // Step i's vectors into slot `slot` (zeros from nload); one group per
    // call, empty past the walk.
    const S* xi = xb + t0 * D;
    const S* gi = gb + t0 * D;
    // Step n's vectors (xi, gi point at them). `checked` false: the caller
    // knows n < nload.
    auto issue = [&](int slot, int n, bool checked) {
      if (!checked || n < nstep) {
        const bool ok = !checked || n < nload;
        if constexpr (kVB == 16) {
          copy16_async(&ring[(2 * slot) * kThreads + th], ok ? xi : xb, ok ? 16 : 0);
          copy16_async(&ring[(2 * slot + 1) * kThreads + th], ok ? gi : gb, ok ? 16 : 0);
        } else {
          copy8_async(&ring[(2 * slot) * kThreads + th], ok ? xi : xb, ok ? 8 : 0);
          copy8_async(&ring[(2 * slot + 1) * kThreads + th], ok ? gi : gb, ok ? 8 : 0);
        }
      }
      copy_async_commit();
      xi += D;
      gi += D;
    };
#pragma unroll
    for (int q = 0; q < kP; ++q) issue(q, q, true);

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

    int rd = 0, wr = kP;  // slots of the step to compute and of the next issue
    S* dxt = dxb + (t0 - (W - 1)) * D;  // dx at the current step's output position
    // Step i from slot `rs`, issuing step i + kP into slot `ws`. `inner` (a
    // constant at each call): W-1 <= i < nsum, so t < L, g is summed and dx
    // lands at t-(W-1) in [t0, L) with no dfinal term; the walk's other
    // steps check each of these. `checked` false: i + kP < nload.
    auto body_at = [&](int i, bool inner, int rs, int ws, bool checked) {
      copy_async_wait<kP - 1>();  // step i's group has landed
      const V xr = ring[(2 * rs) * kThreads + th];
      const V dr = ring[(2 * rs + 1) * kThreads + th];
      issue(ws, i + kP, checked);
      float xv[N], dvv[N];
      {
        S xs[N], ds[N];
        __builtin_memcpy(xs, &xr, kVB);
        __builtin_memcpy(ds, &dr, kVB);
        unpack_f<T, N>(xs, xv);
        unpack_f<T, N>(ds, dvv);
      }
      const int64_t t = t0 + i;
      const bool sum = inner || i < nsum;
      const bool in = sum || t < L;  // i < nsum implies t < L
      float acc[N];
#pragma unroll
      for (int e = 0; e < N; ++e) {
        float gv = 0.0f;
        if (in) {
          float z = bias[e];
          if constexpr (kSilu) {
#pragma unroll
            for (int k = 0; k < W - 1; ++k) z += w[e][k] * xw[k][e];
            z += w[e][W - 1] * xv[e];
          }
          gv = grad_of(dvv[e], z, kSilu);
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
        if (p.has_dfinal && !in && t - L < W - 1) {  // !in: not an inner step
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
      if (inner) {
        store_f<T, N>(dxt, acc);
      } else {
        // dx at t-(W-1) < L; positions before t0 belong to the previous
        // chunk, except in chunk 0 (dinitial_states, g before 0 is zero).
        const int64_t pos = t - (W - 1);
        if ((i >= W - 1 || t0 == 0) && pos < L) {
          if (pos >= 0) {
            store_f<T, N>(dxt, acc);
          } else if (p.ret_dinit) {
            S* dinit = static_cast<S*>(seg.out(Role::kDinitialStates));
#pragma unroll
            for (int e = 0; e < N; ++e) dinit[(b * D + d0 + e) * (W - 1) + t] = T::from_f(acc[e]);
          }
        }
      }
      dxt += D;
    };
    // The slots advanced per step.
    auto body = [&](int i, bool inner) {
      body_at(i, inner, rd, wr, true);
      rd = rd + 1 == kSlots ? 0 : rd + 1;
      wr = wr + 1 == kSlots ? 0 : wr + 1;
    };
    // The first W-1 steps, the inner steps, then the right halo.
    const int nhead = nsum < W - 1 ? nsum : W - 1;
    int i0 = 0;
#pragma unroll 1
    for (; i0 < nhead; ++i0) body(i0, false);
    // kRotate: W-1 inner steps per iteration: the x and g windows come back
    // to the same registers, so shifting them costs no moves.
    constexpr int kU = W - 1;
    constexpr bool kRot = detail::BwdClTraits<sizeof(S), W>::kRotate && kU > 1;
    // When the ring's slots are a whole number of rotations, a whole turn
    // of the ring per iteration: every slot a constant, and while the
    // steps issued lie below nload, no checks (kSlots steps from slot kU,
    // where the head left it).
    if constexpr (kRot && kSlots % kU == 0) {
      if (i0 == kU) {
#pragma unroll 1
        for (; i0 + kSlots <= nsum && i0 + kSlots + kP <= nload; i0 += kSlots) {
#pragma unroll
          for (int q = 0; q < kSlots; ++q) body_at(i0 + q, true, (kU + q) % kSlots, (kU + kP + q) % kSlots, false);
        }
      }
    }
    if constexpr (kRot) {
#pragma unroll 1
      for (; i0 + kU <= nsum; i0 += kU) {
#pragma unroll
        for (int q = 0; q < kU; ++q) body(i0 + q, true);
      }
    }
#pragma unroll 1
    for (; i0 < nsum; ++i0) body(i0, true);
#pragma unroll 1
    for (; i0 < nstep; ++i0) body(i0, false);
    copy_async_wait<0>();
  }

  // `red` aliases the ring.
  __syncthreads();
  store_cl_partials<N, W>(p, seg, red, dw, dbias, tx, ty, dv < nD, d0, b * ntb + tb, B * ntb);
}

template <class T, int W>
__global__ void __launch_bounds__(kClCols * kClRows, (detail::BwdClTraits<sizeof(typename T::S), W>::kMinBlocks))
    bwd_cl_kernel(KParams p) {
  gpu_allow_dependents();  // the next launch may take the SMs this one frees
  constexpr int kRedBytes = kClRows * kClCols * detail::kClVecBwd * (W + 1) * 4;
  constexpr int kRingBytes = detail::ClBwdRingBytes(sizeof(typename T::S));
  __shared__ uint4 smem[(kRedBytes > kRingBytes ? kRedBytes : kRingBytes) / 16];
  float* red = reinterpret_cast<float*>(smem);
  const int tx = threadIdx.x % kClCols;
  const int ty = threadIdx.x / kClCols;
  for (int64_t tile = blockIdx.x; tile < p.total_tiles; tile += gridDim.x) {
    const Conv1dSegment seg = p.segs[find_tile_segment(p, tile, tx)];
    if (seg.vec) {
      BoolSwitch(p.silu, [&](auto silu) {
        bwd_cl_ring<T, W, decltype(silu)::value>(p, seg, tile - seg.tile_begin, tx, ty, smem, red);
      });
    } else {
      bwd_cl_block<T, 1, W>(p, seg, tile - seg.tile_begin, tx, ty, red);
    }
  }
  if (p.fused_reduce != 0) {
    // Every block is resident (a cooperative launch): after the barrier
    // every partial is written; the blocks' teams sum them as
    // reduce_dw_kernel's would, in the same order.
    static_assert(kClCols * kClRows == kTeam * kTeamsPerBlock, "a block is kTeamsPerBlock teams");
    gpu_grid_sync();
    const int64_t team = static_cast<int64_t>(blockIdx.x) * kTeamsPerBlock + threadIdx.x / kTeam;
    const int64_t nteams = static_cast<int64_t>(gridDim.x) * kTeamsPerBlock;
    if (p.fused_reduce == 2) reduce::reduce_dw_teams<true, W + 1>(p, team, nteams);
    else reduce::reduce_dw_teams<false, W + 1>(p, team, nteams);
  }
}


}  // namespace

template <class T>
hipError_t LaunchBwdCl(const KParams& k, hipStream_t s) {
  const unsigned grid = GridFor(k.total_tiles);
  hipError_t e = hipSuccess;
  const bool launched = WidthSwitch(k.width, [&](auto w) {
    if (k.fused_reduce != 0) {
      KParams arg = k;
      void* args[] = {&arg};
      e = hipLaunchCooperativeKernel(reinterpret_cast<const void*>(&bwd_cl_kernel<T, decltype(w)::value>),
                                     dim3(grid), dim3(kClCols * kClRows), args, 0, s);
    } else {
      bwd_cl_kernel<T, decltype(w)::value><<<grid, kClCols * kClRows, 0, s>>>(k);
      e = hipGetLastError();
    }
  });
  return launched ? e : hipErrorInvalidValue;
}

template <class T>
int BwdClBlocksPerSm(int width) {
  int n = 0;
  WidthSwitch(width, [&](auto w) { n = BlocksPerSm(bwd_cl_kernel<T, decltype(w)::value>, kClCols * kClRows); });
  return n;
}

template int BwdClBlocksPerSm<F32>(int);
template int BwdClBlocksPerSm<F16>(int);
template int BwdClBlocksPerSm<BF16>(int);

template hipError_t LaunchBwdCl<F32>(const KParams&, hipStream_t);
template hipError_t LaunchBwdCl<F16>(const KParams&, hipStream_t);
template hipError_t LaunchBwdCl<BF16>(const KParams&, hipStream_t);

}  // namespace conv1d::kernels::dev
