// Backward, channel-first short rows on the vector path where teams walk
// runs of tiles (BwdShortTraits::kPersist true: fp16/bf16): bwd_cf_run_team,
// no more blocks than the device holds at once.
#include "kernels/bwd_common.h"

namespace conv1d::kernels::dev {
namespace {

using detail::kClCols;
using detail::kClRows;
using detail::kTeam;
using detail::kTeamsPerBlock;
using detail::WidthSwitch;

// Short rows on the vector path where BwdShortPersist (fp16/bf16 by
// default; bwd_cf_short_kernel): as bwd_cf_rows_team, but a team walks nrt consecutive rows of one segment
// from row_begin (a run of whole tiles), kTeam / lpr rows at a time (a step:
// lane l holds elements (l % lpr) * N .. + N - 1 of row l / lpr of the
// step), as bwd_cf_stream_team walks a long row: x and dout of the next kP
// steps are in flight while a step computes, copied asynchronously into the
// team's ring `stage` (kP + 1 slots), across the whole run. The rows come in
// groups of kTeam (lpr steps): at a group's first step lane l loads the
// weights, bias and states of the group's row l, fetched per step by
// shuffle. Per step: left x̃ halo from the previous lane (the initial state
// for a row's first lane), g once per element, right g halo from the next
// lane (zero past L), dx, and each row's dweight/dbias summed over its lpr
// lanes (a fixed-order reduce-scatter, below), stored by the lanes that end
// with them: the channel's value itself when B == 1 (ws_partial_offset < 0),
// else its partial for reduce_dw_kernel. Lanes past L or past the run's
// rows read zeros (g = 0) and store nothing. Results do not depend on how
// rows are grouped in tiles, runs or steps.
template <class T, int W, bool kSilu>
__device__ __forceinline__ void bwd_cf_run_team(const KParams& p, const Conv1dSegment& seg,
                                                 int64_t row_begin, int nrt, int lane,
                                                 uint4 (*stage)[2][kTeam]) {
  using S = typename T::S;
  constexpr int N = kVecElts<T>;
  constexpr int kH = W - 1;
  constexpr int kP = detail::kBwdShortPrefetch;
  constexpr int kSlots = kP + 1;
  static_assert(N > kH, "a lane's tail must hold the whole halo");
  const int64_t L = seg.seqlen;
  const int lpr = seg.lanes_per_row;
  const int rps = kTeam / lpr;  // rows per step
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

  // Step st's vectors into slot `slot` (nothing past the run's steps, an
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

  // Lane l: weights, bias and states of the current group's row l.
  float wl[W], bl = 0.0f, il[kH], fl[kH];
  // The channel of this lane's row of the step, carried from step to step
  // (the rows advance by rps; a division per step cost 24 instructions).
  int64_t dstep = mod_fast(row_begin + sub, p.dim);

#pragma unroll 1
  for (int st = 0; st < nsteps; ++st) {
    if ((st & (lpr - 1)) == 0) {
      const int g0 = st * rps;  // the group's first row in the run
#pragma unroll
      for (int k = 0; k < W; ++k) wl[k] = 0.0f;
      bl = 0.0f;
#pragma unroll
      for (int i = 0; i < kH; ++i) il[i] = fl[i] = 0.0f;
      if (g0 + lane < nrt) {
        const int64_t r = row_begin + g0 + lane;
        const int64_t d = mod_fast(r, p.dim);
#pragma unroll
        for (int k = 0; k < W; ++k) wl[k] = load_any(seg.in(Role::kWeight), d * W + k, p.wtype);
        if (p.has_bias) bl = load_any(seg.in(Role::kBias), d, p.wtype);
        if (p.has_init) {
#pragma unroll
          for (int i = 0; i < kH; ++i) il[i] = T::to_f(static_cast<const S*>(seg.in(Role::kInitialStates))[r * kH + i]);
        }
        if (p.has_dfinal) {
#pragma unroll
          for (int i = 0; i < kH; ++i) fl[i] = T::to_f(static_cast<const S*>(seg.in(Role::kDfinalStates))[r * kH + i]);
        }
      }
    }
    copy_async_wait<kP - 1>();  // step st's group has landed
    const uint4 xb = stage[rd][0][lane];
    const uint4 db = stage[rd][1][lane];
    issue(st + kP, wr);
    rd = rd + 1 == kSlots ? 0 : rd + 1;
    wr = wr + 1 == kSlots ? 0 : wr + 1;
    const int rs = (st * rps + sub) & (kTeam - 1);  // row of the group, and the lane holding its weights
    const int rr = st * rps + sub;  // row of the run
    const bool ok = inrow && rr < nrt;
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
      if constexpr (kSilu) {
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
    const int64_t r = row_begin + rr;
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
    const int64_t d = dstep;
    dstep += rps;
    while (dstep >= p.dim) dstep -= p.dim;  // once at most when D >= rps
    const bool rowv = rr < nrt;
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
  copy_async_wait<0>();  // the ring is free for the team's next run
}


template <class T, int W>
__global__ void __launch_bounds__(kTeam * kTeamsPerBlock,
                                  detail::BwdShortMinBlocks(sizeof(typename T::S)))
    bwd_cf_run_kernel(KParams p) {
  // Each team's ring of in-flight steps (bwd_cf_run_team).
  __shared__ uint4 stage[kTeamsPerBlock][detail::kBwdShortPrefetch + 1][2][kTeam];
  const int lane = threadIdx.x % kTeam;
  const int team = threadIdx.x / kTeam;
  const int64_t ntiles = p.total_tiles - p.tile_begin;
  // Team g of G takes the contiguous tiles [T * g / G, T * (g + 1) / G)
  // and walks each segment's part of them as one run (bwd_cf_run_team),
  // so the ring keeps running from tile to tile; the launcher sizes the
  // grid to the blocks the device holds at once, which gives every team
  // an even share.
  const int64_t nteams = static_cast<int64_t>(gridDim.x) * kTeamsPerBlock;
  const int64_t gteam = static_cast<int64_t>(blockIdx.x) * kTeamsPerBlock + team;
  int64_t tile = p.tile_begin + ntiles * gteam / nteams;
  for (;;) {
    // Recomputed per run rather than kept live across the walk.
    const int64_t tile_end = p.tile_begin + ntiles * (gteam + 1) / nteams;
    if (tile >= tile_end) break;
    const int idx = find_segment_team(p.segs, p.nseg, tile, lane);
    const Conv1dSegment& seg = p.segs[idx];
    const int64_t local = tile - seg.tile_begin;
    if (!is_short_tile(seg)) {
      // Another kernel's segment inside the planner's short range.
      tile = idx + 1 < p.nseg ? p.segs[idx + 1].tile_begin : tile_end;
      continue;
    }
    const int64_t rpt = seg.rows_per_tile;
    const int64_t nrows = seg.batch * p.dim;
    const int64_t seg_tiles = (nrows + rpt - 1) / rpt;
    int64_t run = seg_tiles - local < tile_end - tile ? seg_tiles - local : tile_end - tile;
    if (run > (int64_t{1} << 30) / rpt) run = (int64_t{1} << 30) / rpt;  // int32 row counts
    const int64_t row_begin = local * rpt;
    const int64_t row_end = (local + run) * rpt < nrows ? (local + run) * rpt : nrows;
    const int nrt = static_cast<int>(row_end - row_begin);
    if constexpr (detail::HaloInVector(W, kVecElts<T>)) {
      BoolSwitch(p.silu, [&](auto silu) {
        bwd_cf_run_team<T, W, decltype(silu)::value>(p, seg, row_begin, nrt, lane, stage[team]);
      });
    }
    tile += run;
  }
}


}  // namespace

template <class T>
hipError_t LaunchBwdCfRun(const KParams& k, hipStream_t s) {
  constexpr int kTeams = kTeamsPerBlock;
  unsigned grid = GridFor((k.total_tiles - k.tile_begin + kTeams - 1) / kTeams);
  // No more blocks than the device holds at once (each team an even share).
  int dev = 0, sms = 0;
  if (hipGetDevice(&dev) == hipSuccess &&
      hipDeviceGetAttribute(&sms, hipDeviceAttributeMultiprocessorCount, dev) == hipSuccess && sms > 0) {
    const unsigned resident =
        static_cast<unsigned>(sms) * detail::BwdShortMinBlocks(sizeof(typename T::S));
    if (grid > resident) grid = resident;
  }
  const bool launched = WidthSwitch(k.width, [&](auto w) {
    bwd_cf_run_kernel<T, decltype(w)::value><<<grid, kTeam * kTeams, 0, s>>>(k);
  });
  return launched ? hipGetLastError() : hipErrorInvalidValue;
}

template hipError_t LaunchBwdCfRun<F16>(const KParams&, hipStream_t);
template hipError_t LaunchBwdCfRun<BF16>(const KParams&, hipStream_t);

}  // namespace conv1d::kernels::dev
