// Backward, channel-first short rows on the vector path where teams take
// one tile each (BwdShortTraits::kPersist false: fp32): bwd_cf_rows_team.
#include "kernels/bwd_common.h"

namespace conv1d::kernels::dev {
namespace {

using detail::kClCols;
using detail::kClRows;
using detail::kTeam;
using detail::kTeamsPerBlock;
using detail::WidthSwitch;

// Short rows on the vector path (rows_per_tile > 1; planner: a row fits in
// lanes_per_row lanes of one 16-byte vector each, lpr a power of two): a
// team owns rows_per_tile (<= kTeam) consecutive rows of one segment and
// walks them kTeam / lpr rows at a time (a step: lane l holds elements
// (l % lpr) * N .. + N - 1 of row l / lpr of the step), as
// bwd_cf_stream_team walks a long row: x and dout of the next kP steps are
// in flight while a step computes, copied asynchronously into the team's
// ring `stage` (kP + 1 slots). The weights, bias and states of the tile's
// rows are loaded once, lane l holding row l's, and fetched per step by
// shuffle. Per step: left x̃ halo from the previous lane (the initial state
// for a row's first lane), g once per element, right g halo from the next
// lane (zero past L), dx, and each row's dweight/dbias summed over its lpr
// lanes (a fixed-order reduce-scatter, below), stored by the lanes that end
// with them: the channel's value itself when B == 1 (ws_partial_offset < 0),
// else its partial for reduce_dw_kernel. Lanes past L or past the tile's
// rows read zeros (g = 0) and store nothing. Results do not depend on how
// rows are grouped in tiles.
template <class T, int W>
__device__ __forceinline__ void bwd_cf_rows_team(const KParams& p, const Conv1dSegment& seg,
                                                 int64_t local, int lane,
                                                 uint4 (*stage)[2][kTeam]) {
  using S = typename T::S;
  constexpr int N = kVecElts<T>;
  constexpr int kH = W - 1;
  constexpr int kP = detail::kBwdShortPrefetch;
  constexpr int kSlots = kP + 1;
  static_assert(N > kH, "a lane's tail must hold the whole halo");
  const int64_t L = seg.seqlen;
  const int64_t nrows = seg.batch * p.dim;
  const int lpr = seg.lanes_per_row;
  const int rps = kTeam / lpr;  // rows per step
  const int64_t row_begin = local * seg.rows_per_tile;
  const int64_t left = nrows - row_begin;
  const int nrt = left < seg.rows_per_tile ? static_cast<int>(left) : seg.rows_per_tile;
  const int nsteps = (nrt + rps - 1) / rps;
  const int sub = lane / lpr;  // row of the step
  const int pos = (lane & (lpr - 1)) * N;
  const bool first = pos == 0;
  const bool inrow = pos < L;
  const int src_prev = (lane + kTeam - 1) & (kTeam - 1);
  const int src_next = (lane + 1) & (kTeam - 1);
  const int64_t lane_off = (row_begin + sub) * L + pos;
  const int64_t step_off = static_cast<int64_t>(rps) * L;
  const S* xp = static_cast<const S*>(seg.in(Role::kX)) + lane_off;
  const S* dp = static_cast<const S*>(seg.in(Role::kDout)) + lane_off;
  S* dxp = static_cast<S*>(seg.out(Role::kDx)) + lane_off;
  // Read once: the loop's stores could alias the segment table as far as
  // the compiler knows, which would reload these after every store.
  void* const dweight = seg.out(Role::kDweight);
  void* const dbias = seg.out(Role::kDbias);
  S* const dinit0 = static_cast<S*>(seg.out(Role::kDinitialStates));
  const int64_t ws_off = seg.ws_partial_offset;
  const int64_t seg_batch = seg.batch;

  // Step st's vectors into slot `slot` (nothing past the tile's steps, an
  // empty group). One group per call.
  auto issue = [&](int st, int slot) {
    if (st < nsteps) {
      const bool ok = inrow && st * rps + sub < nrt;
      const int64_t off = ok ? st * step_off : 0;
      copy16_async(&stage[slot][0][lane], xp + off, ok ? 16 : 0);
      copy16_async(&stage[slot][1][lane], dp + off, ok ? 16 : 0);
    }
    copy_async_commit();
  };
#pragma unroll
  for (int q = 0; q < kP; ++q) issue(q, q);
  int rd = 0, wr = kP;  // slots of the step to compute and of the next issue

  // Lane l: weights, bias and states of the tile's row l.
  float wl[W], bl = 0.0f, il[kH], fl[kH];
#pragma unroll
  for (int k = 0; k < W; ++k) wl[k] = 0.0f;
#pragma unroll
  for (int i = 0; i < kH; ++i) il[i] = fl[i] = 0.0f;
  if (lane < nrt) {
    const int64_t r = row_begin + lane;
    const int64_t d = mod_fast(r, p.dim);
#pragma unroll
    for (int k = 0; k < W; ++k) wl[k] = load_any(seg.in(Role::kWeight), d * W + k, p.wtype);
    if (p.has_bias) bl = load_any(seg.in(Role::kBias), d, p.wtype);
    if (p.has_init) {
      const S* init = static_cast<const S*>(seg.in(Role::kInitialStates)) + r * kH;
#pragma unroll
      for (int i = 0; i < kH; ++i) il[i] = T::to_f(init[i]);
    }
    if (p.has_dfinal) {
      const S* dfin = static_cast<const S*>(seg.in(Role::kDfinalStates)) + r * kH;
#pragma unroll
      for (int i = 0; i < kH; ++i) fl[i] = T::to_f(dfin[i]);
    }
  }

  // The channel of this lane's row of the step, carried from step to step
  // when the channels fit 31 bits (the rows advance by rps; a division per
  // step cost 24 instructions, a 64-bit carry a spill at W = 4).
  const bool carry = p.dim <= INT32_MAX;
  int32_t dstep = carry ? static_cast<int32_t>(mod_fast(row_begin + sub, p.dim)) : 0;

#pragma unroll 1
  for (int st = 0; st < nsteps; ++st) {
    copy_async_wait<kP - 1>();  // step st's group has landed
    const uint4 xb = stage[rd][0][lane];
    const uint4 db = stage[rd][1][lane];
    issue(st + kP, wr);
    rd = rd + 1 == kSlots ? 0 : rd + 1;
    wr = wr + 1 == kSlots ? 0 : wr + 1;
    const int rs = st * rps + sub;  // row of the tile, and the lane holding its weights
    const bool ok = inrow && rs < nrt;
    float w[W], bias;
#pragma unroll
    for (int k = 0; k < W; ++k) w[k] = gpu_shfl(wl[k], rs, kTeam);
    bias = gpu_shfl(bl, rs, kTeam);
    float xf[kH + N];  // x̃ at pos-(W-1) .. pos+N-1
    float dv[N];
    {
      S xs[N], ds[N];
      __builtin_memcpy(xs, &xb, 16);
      __builtin_memcpy(ds, &db, 16);
      float xv[N];
      unpack_f<T, N>(xs, xv);
      unpack_f<T, N>(ds, dv);
#pragma unroll
      for (int e = 0; e < N; ++e) xf[kH + e] = xv[e];
    }
#pragma unroll
    for (int i = 0; i < kH; ++i) {
      const float got = gpu_shfl(xf[N + i], src_prev, kTeam);
      float own = 0.0f;
      if (p.has_init) own = gpu_shfl(il[i], rs, kTeam);
      xf[i] = first ? own : got;
    }
    float g[N];
#pragma unroll
    for (int e = 0; e < N; ++e) {
      if (p.silu) {
        float z = bias;
#pragma unroll
        for (int k = 0; k < W; ++k) z += w[k] * xf[e + k];
        g[e] = silu_backward_f(dv[e], z);
      } else {
        g[e] = dv[e];
      }
    }
    float gn[kH];  // g at pos+N .. pos+N+W-2, zero past L
#pragma unroll
    for (int i = 0; i < kH; ++i) {
      const float got = gpu_shfl(g[i], src_next, kTeam);
      gn[i] = pos + N + i < L ? got : 0.0f;
    }
    float fv[kH];
#pragma unroll
    for (int i = 0; i < kH; ++i) fv[i] = 0.0f;
    if (p.has_dfinal) {
#pragma unroll
      for (int i = 0; i < kH; ++i) fv[i] = gpu_shfl(fl[i], rs, kTeam);
    }
    float dws[W + 1];  // [W] is dbias
#pragma unroll
    for (int k = 0; k <= W; ++k) dws[k] = 0.0f;
    float dxv[N];
#pragma unroll
    for (int e = 0; e < N; ++e) {
      float acc = 0.0f;
#pragma unroll
      for (int k = 0; k < W; ++k) {
        const int idx = e + kH - k;
        acc += w[k] * (idx < N ? g[idx < N ? idx : 0] : gn[idx >= N ? idx - N : 0]);
      }
      if (p.has_dfinal) {
        // dfinal_states[i] adds to dx at L - (W-1) + i (L >= N > W-1).
#pragma unroll
        for (int i = 0; i < kH; ++i) {
          if (pos + e == L - kH + i) acc += fv[i];
        }
      }
      dxv[e] = acc;
      dws[W] += g[e];
#pragma unroll
      for (int k = 0; k < W; ++k) dws[k] += g[e] * xf[e + k];
    }
    const int64_t r = row_begin + rs;
    if (ok) store_f<T, N>(dxp + st * step_off, dxv);
    if (p.ret_dinit && first && ok) {
      // x̃ positions 0 .. W-2 before x; g at t < W-1 < N is this lane's.
      S* dinit = dinit0 + r * kH;
#pragma unroll
      for (int i = 0; i < kH; ++i) {
        float acc = 0.0f;
#pragma unroll
        for (int k = 0; k <= i; ++k) acc += w[k] * g[i - k];
        dinit[i] = T::from_f(acc);
      }
    }
    // The row's W + 1 sums over its lpr lanes (row_sums_scatter), stored
    // by the lanes that end with them.
    const int64_t d = carry ? dstep : mod_fast(r, p.dim);
    if (carry) {
      dstep += rps;
      while (dstep >= p.dim) dstep -= static_cast<int32_t>(p.dim);  // once at most when D >= rps
    }
    const bool rowv = rs < nrt;
    const int64_t b = ws_off < 0 ? 0 : div_fast(r, p.dim);
    row_sums_scatter<W>(dws, lane, lpr, [&](int k, float v) {
      if (!rowv) return;
      if (ws_off < 0) {
        // B = 1 (planner): the channel's whole sum.
        if (k < W) store_any(dweight, d * W + k, p.gwtype, v);
        else if (p.has_bias) store_any(dbias, d, p.gwtype, v);
      } else {
        p.partials[ws_off + (d * seg_batch + b) * (W + 1) + k] = v;
      }
    });
  }
  copy_async_wait<0>();  // the ring is free for the team's next tile
}


template <class T, int W>
__global__ void __launch_bounds__(kTeam * kTeamsPerBlock,
                                  detail::BwdShortMinBlocks(sizeof(typename T::S)))
    bwd_cf_short_kernel(KParams p) {
  // Each team's ring of in-flight steps (bwd_cf_rows_team).
  __shared__ uint4 stage[kTeamsPerBlock][detail::kBwdShortPrefetch + 1][2][kTeam];
  const int lane = threadIdx.x % kTeam;
  const int team = threadIdx.x / kTeam;
  const int64_t ntiles = p.total_tiles - p.tile_begin;
  // One tile per team.
  for (int64_t blk = blockIdx.x; blk * kTeamsPerBlock < ntiles; blk += gridDim.x) {
    const int64_t tile = p.tile_begin + blk * kTeamsPerBlock + team;
    if (tile >= p.total_tiles) continue;
    // By reference: fields are read where used (the dweight pointers only
    // at the end), which keeps them out of registers across the tile.
    const Conv1dSegment& seg = p.segs[find_segment_team(p.segs, p.nseg, tile, lane)];
    if (!is_short_tile(seg)) continue;
    // The planner gives this kernel no tile when the halo exceeds a vector.
    if constexpr (detail::HaloInVector(W, kVecElts<T>)) {
      bwd_cf_rows_team<T, W>(p, seg, tile - seg.tile_begin, lane, stage[team]);
    }
  }
}


}  // namespace

template <class T>
hipError_t LaunchBwdCfShort(const KParams& k, hipStream_t s) {
  constexpr int kTeams = kTeamsPerBlock;
  unsigned grid = GridFor((k.total_tiles - k.tile_begin + kTeams - 1) / kTeams);
  const bool launched = WidthSwitch(k.width, [&](auto w) {
    bwd_cf_short_kernel<T, decltype(w)::value><<<grid, kTeam * kTeams, 0, s>>>(k);
  });
  return launched ? hipGetLastError() : hipErrorInvalidValue;
}

template hipError_t LaunchBwdCfShort<F32>(const KParams&, hipStream_t);

}  // namespace conv1d::kernels::dev
