// The walk shared by the two channel-first short-row backward kernels on
// the vector path (bwd_cf_short.hip: a team takes one tile, fp32;
// bwd_cf_run.hip: a team walks runs of tiles, fp16/bf16): a team walks nrt
// consecutive rows of one segment from row_begin, kTeam / lpr rows at a
// time (a step: lane l holds elements (l % lpr) * N .. + N - 1 of row
// l / lpr of the step), as bwd_cf_stream_team walks a long row. x and dout
// of the next kP steps are in flight while a step computes, copied
// asynchronously into the team's ring `stage` (kP + 1 slots). Lane l holds
// the weights, bias and states of row l of the current group of kTeam rows
// (load_short_row), fetched per step by shuffle. Per step
// (bwd_cf_short_step): left x̃ halo from the previous lane (the initial
// state for a row's first lane), g once per element, right g halo from the
// next lane (zero past L), dx, and each lane's W + 1 dweight/dbias terms,
// written to the team's RowSums record of the last kSumSteps steps. Every
// kSumSteps steps and at the walk's end, flush_row_sums sums each row of
// those steps over its lpr lanes (in lane order) and stores it: the
// channel's value itself when B == 1 (kWsDirect), else its partial for
// reduce_dw_kernel. Lanes past L or past the walk's rows read zeros (g =
// 0) and store nothing. Results do not depend on how rows are grouped in
// tiles, runs or steps.
//
// Used by kernels/bwd_cf_short.hip and kernels/bwd_cf_run.hip only. Device
// functions and per-lane state; nothing shared between lanes but the
// team's ring and row-sum record, each used by its team alone.
#ifndef CONV1D_KERNELS_BWD_CF_SHORT_STEP_H_
#define CONV1D_KERNELS_BWD_CF_SHORT_STEP_H_

#include <type_traits>

#include "kernels/bwd_common.h"

namespace conv1d::kernels::dev {

// A team's dweight/dbias terms of its last kSumSteps steps:
// [step % kSumSteps][k][lane] (k == W: dbias). Rows of kTeam + 4 floats:
// the lanes that sum a record row read 16 bytes at a time, and the padding
// puts the rows that one quarter-warp reads on different banks.
inline constexpr int kSumRow = kTeam + 4;
template <int W>
using RowSums = float[detail::kBwdShortSumSteps][W + 1][kSumRow];

// Weights, bias and states of row r (zeros when !valid): lane l loads those
// of its group's row l.
template <class T, int W>
__device__ __forceinline__ void load_short_row(const KParams& p, const Conv1dSegment& seg,
                                               int64_t r, bool valid, float (&wl)[W], float& bl,
                                               float (&il)[W - 1], float (&fl)[W - 1]) {
  using S = typename T::S;
  constexpr int kH = W - 1;
#pragma unroll
  for (int k = 0; k < W; ++k) wl[k] = 0.0f;
  bl = 0.0f;
#pragma unroll
  for (int i = 0; i < kH; ++i) il[i] = fl[i] = 0.0f;
  if (!valid) return;
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

// One lane's part of a walk: where its vectors are, the ring, and the
// outputs. Built per walk; the ring's slots are the team's.
template <class T>
struct ShortWalk {
  using S = typename T::S;
  static constexpr int kP = detail::kBwdShortPrefetch;
  static constexpr int kSlots = kP + 1;

  // kMove: the lane's pointers move on by step_off per step (the next
  // step to issue, the step to compute), which spares a step its 64-bit
  // products; else each is the step-0 pointer plus st * step_off. Moving
  // them took fused64 bf16 bwd from 54.7 to 56.7 % of a copy and the fp32
  // kernel (80 registers) from 70.2 to 68.7 (H200, 2026-11-29). Without
  // kMove the walk is one tile (at most kTeam rows, a step at most kTeam *
  // N elements), so st * step_off fits 32 bits.
  static constexpr bool kMove = sizeof(S) < 4;
  static_assert(kMove || !detail::BwdShortPersist(sizeof(S)), "32-bit step offsets need walks of one tile");
  const S* xp;  // this lane's x, dout and dx at step 0
  const S* dp;
  S* dxp;
  const S* xi;  // kMove: x and dout of the next step to issue
  const S* di;
  S* dxs;       // kMove: dx of the step to compute
  // Read once: the steps' stores could alias the segment table as far as
  // the compiler knows, which would reload these after every store.
  void* dweight;
  void* dbias;
  S* dinit0;
  int64_t ws_off;
  int64_t seg_batch;
  int64_t L;
  int64_t step_off;  // elements from one step's vector to the next
  uint4 (*stage)[2][kTeam];
  int nrt, nsteps, lane, lpr, rps, sub, pos, src_prev, src_next;
  int room;  // elements of the row after this lane's vector, at most N (32-bit compares)
  bool first, inrow;
  int rd = 0, wr = kP;  // slots of the step to compute and of the next issue
  int ri;               // kMove: this lane's row of the next step to issue

  __device__ __forceinline__ ShortWalk(const Conv1dSegment& seg, int64_t row_begin, int nrt_,
                                       int lane_, uint4 (*stage_)[2][kTeam])
      : L(seg.seqlen), stage(stage_), nrt(nrt_), lane(lane_) {
    constexpr int N = kVecElts<T>;
    lpr = seg.lanes_per_row;
    rps = kTeam / lpr;
    nsteps = (nrt + rps - 1) / rps;
    sub = lane / lpr;
    pos = (lane & (lpr - 1)) * N;
    first = pos == 0;
    inrow = pos < L;
    const int64_t after = L - pos - N;
    room = after < 0 ? 0 : after > N ? N : static_cast<int>(after);
    src_prev = (lane + kTeam - 1) & (kTeam - 1);
    src_next = (lane + 1) & (kTeam - 1);
    const int64_t lane_off = (row_begin + sub) * L + pos;
    step_off = static_cast<int64_t>(rps) * L;
    xp = static_cast<const S*>(seg.in(Role::kX)) + lane_off;
    dp = static_cast<const S*>(seg.in(Role::kDout)) + lane_off;
    dxp = static_cast<S*>(seg.out(Role::kDx)) + lane_off;
    xi = xp;
    di = dp;
    dxs = dxp;
    ri = sub;
    dweight = seg.out(Role::kDweight);
    dbias = seg.out(Role::kDbias);
    dinit0 = static_cast<S*>(seg.out(Role::kDinitialStates));
    ws_off = seg.ws_partial_offset;
    seg_batch = seg.batch;
  }

  // Step st's vectors into slot `slot` (nothing past the walk's steps, an
  // empty group). One group per call.
  __device__ __forceinline__ void issue(int st, int slot) {
    if (st < nsteps) {
      if constexpr (kMove) {
        const bool ok = inrow && ri < nrt;
        ri += rps;
        copy16_async(&stage[slot][0][lane], ok ? xi : xp, ok ? 16 : 0);
        copy16_async(&stage[slot][1][lane], ok ? di : dp, ok ? 16 : 0);
        xi += step_off;
        di += step_off;
      } else {
        const bool ok = inrow && st * rps + sub < nrt;
        const int off = ok ? st * static_cast<int>(step_off) : 0;
        copy16_async(&stage[slot][0][lane], xp + off, ok ? 16 : 0);
        copy16_async(&stage[slot][1][lane], dp + off, ok ? 16 : 0);
      }
    }
    copy_async_commit();
  }
  __device__ __forceinline__ void start() {
#pragma unroll
    for (int q = 0; q < kP; ++q) issue(q, q);
  }
  // Step st's x and dout; the next step's copies issued.
  __device__ __forceinline__ void take(int st, uint4& xb, uint4& db) {
    copy_async_wait<kP - 1>();  // step st's group has landed
    xb = stage[rd][0][lane];
    db = stage[rd][1][lane];
    issue(st + kP, wr);
    rd = rd + 1 == kSlots ? 0 : rd + 1;
    wr = wr + 1 == kSlots ? 0 : wr + 1;
  }
  // Where step st's dx goes; next_out() after its store moves on.
  __device__ __forceinline__ S* out(int st) const {
    if constexpr (kMove) return dxs;
    return dxp + st * static_cast<int>(step_off);
  }
  __device__ __forceinline__ void next_out() {
    if constexpr (kMove) dxs += step_off;
  }
  // The ring free for the team's next walk.
  __device__ __forceinline__ void finish() { copy_async_wait<0>(); }
};

// Step st of a walk: row rr = st * rps + sub of the walk, rs of its group
// of kTeam rows (the lane holding its parameters), r of the segment. x and
// dout in xb and db; the group's row parameters in wl .. fl (lane l: row l
// of the group). The lane's dweight/dbias terms go to sums[st %
// kSumSteps]. silu: bool, or a std::integral_constant to drop the other
// branch at compile time.
template <class T, int W, class Silu>
__device__ __forceinline__ void bwd_cf_short_step(const KParams& p, const ShortWalk<T>& wk, int st,
                                                  uint4 xb, uint4 db, const float (&wl)[W], float bl,
                                                  const float (&il)[W - 1], const float (&fl)[W - 1],
                                                  int rr, int rs, int64_t r, RowSums<W>& sums,
                                                  Silu silu) {
  using S = typename T::S;
  constexpr int N = kVecElts<T>;
  constexpr int kH = W - 1;
  static_assert(N > kH, "a lane's tail must hold the whole halo");
  const int64_t L = wk.L;
  const int pos = wk.pos;
  const bool first = wk.first;
  const bool rowv = rr < wk.nrt;
  const bool ok = wk.inrow && rowv;
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
    const float got = gpu_shfl(xf[N + i], wk.src_prev, kTeam);
    float own = 0.0f;
    if (p.has_init) own = gpu_shfl(il[i], rs, kTeam);
    xf[i] = first ? own : got;
  }
  float g[N];
#pragma unroll
  for (int e = 0; e < N; ++e) {
    if (silu) {
      g[e] = silu_backward_f(dv[e], preact(w, bias, xf, e));
    } else {
      g[e] = dv[e];
    }
  }
  float gn[kH];  // g at pos+N .. pos+N+W-2, zero past L
#pragma unroll
  for (int i = 0; i < kH; ++i) {
    const float got = gpu_shfl(g[i], wk.src_next, kTeam);
    gn[i] = i < wk.room ? got : 0.0f;
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
    dxv[e] = dx_of_g<W, N>(w, g, gn, e);
    dws[W] += g[e];
#pragma unroll
    for (int k = 0; k < W; ++k) dws[k] += g[e] * xf[e + k];
  }
  if (p.has_dfinal) {  // one branch per step, not one per element
    // dfinal_states[i] adds to dx at L - (W-1) + i (L >= N > W-1).
#pragma unroll
    for (int e = 0; e < N; ++e) {
#pragma unroll
      for (int i = 0; i < kH; ++i) {
        if (pos + e == L - kH + i) dxv[e] += fv[i];
      }
    }
  }
  if (ok) store_f<T, N>(wk.out(st), dxv);
  if (p.ret_dinit) {  // uniform: the lanes' branch only when asked for
    if (first && ok) {
      // x̃ positions 0 .. W-2 before x; g at t < W-1 < N is this lane's.
      store_dinit_row<T, W>(wk.dinit0 + r * kH, w, g);
    }
  }
  float (&mine)[W + 1][kSumRow] = sums[st & (detail::kBwdShortSumSteps - 1)];
#pragma unroll
  for (int k = 0; k <= W; ++k) mine[k][wk.lane] = dws[k];
}

// The row sums of steps st0 .. st0 + nq - 1 of a walk from row_begin
// (nq <= kSumSteps; st0 a multiple of kSumSteps), from `sums`: lanes_per_row /
// kSumSteps lanes take each row of those steps (lane l: row l / that of the
// group, sums k = l % that, + that, ... <= W), each sum over the row's lpr
// lanes in lane order, and store it as the step used to. Every lane of the
// team calls it; it orders the record's writes before it and its reads
// before the next steps' writes.
template <class T, int W>
__device__ __forceinline__ void flush_row_sums(const KParams& p, const ShortWalk<T>& wk,
                                               const RowSums<W>& sums, int64_t row_begin, int st0,
                                               int nq) {
  constexpr int kG = detail::kBwdShortSumSteps;
  gpu_team_sync();
  const int lpr = wk.lpr;
  static_assert(kG == 4 && kTeam == 32, "the shifts below");
  const int per_row = lpr >> 2;  // >= 1: lpr >= kMinLanesPerRow >= kG
  const int lpr_log = 31 - __clz(lpr);  // lpr and rps are powers of two
  const int rho = wk.lane >> (lpr_log - 2);
  const int q = rho >> (5 - lpr_log);   // rps == kTeam / lpr
  const int j = rho & (wk.rps - 1);
  const int rr = st0 * wk.rps + rho;
  if (q < nq && rr < wk.nrt) {
    const int64_t r = row_begin + rr;
    const int64_t ws_off = wk.ws_off;
    // kWsDirect (B == 1): the row is the channel. Else the partial's slot.
    float* part = nullptr;
    if (ws_off >= 0) {
      const int64_t d = mod_fast(r, p.dim), b = div_fast(r, p.dim);
      part = p.partials + ws_off + (d * wk.seg_batch + b) * (W + 1);
    }
    const int nv = lpr / 4;
#pragma unroll 1
    for (int k = wk.lane & (per_row - 1); k <= W; k += per_row) {
      const float4* v = reinterpret_cast<const float4*>(&sums[q][k][j * lpr]);
      float acc = 0.0f;
#pragma unroll 2
      for (int i = 0; i < nv; ++i) {
        const float4 t = v[i];
        acc += (t.x + t.y) + (t.z + t.w);  // one add on the chain per vector
      }
      if (part != nullptr) {
        part[k] = acc;
      } else if (k < W) {
        store_any(wk.dweight, r * W + k, p.gwtype, acc);
      } else if (p.has_bias) {
        store_any(wk.dbias, r, p.gwtype, acc);
      }
    }
  }
  gpu_team_sync();
}

}  // namespace conv1d::kernels::dev

#endif  // CONV1D_KERNELS_BWD_CF_SHORT_STEP_H_
