// Forward kernels of the fast path (W = 2..4) over a ragged segment table:
// channel-first (a 32-lane team per row chunk, 16-byte vectors, halo by
// shuffles; short scalar rows a tile of rows at a time through shared
// memory) and channel-last (each thread streams a time chunk of a channel
// vector with a register window; 16-bit vectors through a shared-memory
// ring of asynchronous copies). One launch covers every segment.
#include <algorithm>
#include <type_traits>

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
  S* fin = static_cast<S*>(seg.out(Role::kFinalStates)) + row * (W - 1);
  const S* init = static_cast<const S*>(seg.in(Role::kInitialStates));
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

// Short scalar rows (rows_per_tile > 1, not the vector path): a team owns
// the tile's rows [base, base + rows) of one segment, at most
// kMaxPerLaneFwd * kTeam / lanes_per_row of them, each no longer than
// lanes_per_row (>= kMinLanesPerRow). The tile's x, y, initial and final
// states are each one contiguous block, so they move between memory and the
// team's shared staging in coalesced passes of whole lines, every load
// issued before the first store; lanes then compute one element per row
// slot from staging.
// Whole-line transfers matter most when the tensors live in host memory
// that the kernel reads and writes in place over the bus, where a lane's own
// strided row state or a 32-byte piece costs a bus transfer each.
// Staging of one team: x (then y) of at most kShortRowMaxElems elements,
// and the initial states of at most kShortRowMaxRows rows.
inline constexpr int kShortRowMaxElems = detail::kMaxPerLaneFwd * kTeam;
inline constexpr int kShortRowMaxRows =
    detail::kMaxPerLaneFwd * (kTeam / detail::kMinLanesPerRow);
static_assert(kShortRowMaxRows <= kTeam, "lane l holds the weights of the tile's row l");
template <int W>
inline constexpr int kShortRowStageFloats = kShortRowMaxElems + kShortRowMaxRows * (W - 1);

template <class T, int W>
__device__ __forceinline__ void fwd_cf_rows_staged(const KParams& p, const Conv1dSegment& seg,
                                                   int64_t local, int lane, float* sm) {
  using S = typename T::S;
  constexpr int kMax = detail::kMaxPerLaneFwd;
  constexpr int kH = W - 1;
  constexpr int kPassesX = kShortRowMaxElems / kTeam;       // rows * L elements
  constexpr int kPassesS = (kShortRowMaxRows * kH + kTeam - 1) / kTeam;  // rows * kH
  float* smx = sm;                      // x, then y: [rows][L]
  float* sms = sm + kShortRowMaxElems;  // initial states: [rows][kH]
  const int64_t L = seg.seqlen;
  const int lpr = seg.lanes_per_row;
  const int64_t nrows = seg.batch * p.dim;
  const int64_t base = local * seg.rows_per_tile;
  const int rows = static_cast<int>(nrows - base < seg.rows_per_tile ? nrows - base
                                                                     : seg.rows_per_tile);
  const int nx = rows * static_cast<int>(L);
  const int ns = rows * kH;
  const S* xt = static_cast<const S*>(seg.in(Role::kX)) + base * L;
  const S* it = p.has_init ? static_cast<const S*>(seg.in(Role::kInitialStates)) + base * kH : nullptr;

  gpu_team_sync();  // the team's previous tile is done with sm
  S xv[kPassesX], iv[kPassesS > 0 ? kPassesS : 1];
#pragma unroll
  for (int k = 0; k < kPassesX; ++k) {
    const int i = lane + k * kTeam;
    if (i < nx) xv[k] = xt[i];
  }
#pragma unroll
  for (int k = 0; k < kPassesS; ++k) {
    const int i = lane + k * kTeam;
    if (it != nullptr && i < ns) iv[k] = it[i];
  }
  // Weights: lane l holds those of the tile's row l (slots fetch theirs by
  // shuffle).
  float wl[W] = {}, bl = 0.0f;
  if (lane < rows) {
    const int64_t d = mod_fast(base + lane, p.dim);
#pragma unroll
    for (int k = 0; k < W; ++k) wl[k] = load_any(seg.in(Role::kWeight), d * W + k, p.wtype);
    if (p.has_bias) bl = load_any(seg.in(Role::kBias), d, p.wtype);
  }
#pragma unroll
  for (int k = 0; k < kPassesX; ++k) {
    const int i = lane + k * kTeam;
    if (i < nx) smx[i] = T::to_f(xv[k]);
  }
#pragma unroll
  for (int k = 0; k < kPassesS; ++k) {
    const int i = lane + k * kTeam;
    if (i < ns) sms[i] = it != nullptr ? T::to_f(iv[k]) : 0.0f;
  }
  gpu_team_sync();

  // x̃ at position q of tile row r: x, or the initial state for q < 0.
  auto xt_at = [&](int r, int64_t q) {
    return q >= 0 ? smx[r * L + q] : sms[r * kH + kH + q];
  };
  const int pos = lane & (lpr - 1);
  const int rstep = kTeam / lpr;
  float yv[kMax];
#pragma unroll
  for (int j = 0; j < kMax; ++j) {
    const int r = lane / lpr + j * rstep;
    float w[W];
#pragma unroll
    for (int k = 0; k < W; ++k) w[k] = gpu_shfl(wl[k], r < kTeam ? r : 0, kTeam);
    const float b = gpu_shfl(bl, r < kTeam ? r : 0, kTeam);
    yv[j] = 0.0f;
    if (r < rows && pos < L) {
      float z = b;
#pragma unroll
      for (int k = 0; k < W; ++k) z += w[k] * xt_at(r, pos - kH + k);
      yv[j] = act_fwd(z, p.silu);
    }
  }
  // Final states: x̃ at L-(W-1) .. L-1 of each row, one coalesced pass.
  if (p.ret_final) {
    S* ft = static_cast<S*>(seg.out(Role::kFinalStates)) + base * kH;
#pragma unroll
    for (int k = 0; k < kPassesS; ++k) {
      const int i = lane + k * kTeam;
      if (i < ns) ft[i] = T::from_f(xt_at(i / kH, L - kH + i % kH));
    }
  }
  gpu_team_sync();  // every read of x from smx is done
#pragma unroll
  for (int j = 0; j < kMax; ++j) {
    const int r = lane / lpr + j * rstep;
    if (r < rows && pos < L) smx[r * L + pos] = yv[j];
  }
  gpu_team_sync();
  S* yt = static_cast<S*>(seg.out(Role::kY)) + base * L;
#pragma unroll
  for (int k = 0; k < kPassesX; ++k) {
    const int i = lane + k * kTeam;
    if (i < nx) yt[i] = T::from_f(smx[i]);
  }
}

// A team owns one row chunk: `per_lane` consecutive vectors (slots) per
// lane. Data stay in storage format until used; every load is issued before
// the first use. The left halo (x̃ at pos-(W-1) .. pos-1) comes from the
// neighbouring lane by shuffle; only the chunk's first lane loads its own.
template <class T, int N, int W>
__device__ __forceinline__ void fwd_cf_team(const KParams& p, const Conv1dSegment& seg,
                                            int64_t local, int lane) {
  using S = typename T::S;
  constexpr int kMax = detail::kMaxPerLaneFwd;
  constexpr int kH = W - 1;
  constexpr bool kShuffle = N >= kH;
  const int64_t L = seg.seqlen;
  const S* x = static_cast<const S*>(seg.in(Role::kX));
  S* y = static_cast<S*>(seg.out(Role::kY));

  // Slot j of this lane: in-row offset pos0 + j * kTeam * N.
  const int V = seg.per_lane;
  const int64_t nchunks = seg.nchunks;
  const int64_t row0 = div_fast(local, nchunks);
  const int64_t chunk = local - row0 * nchunks;
  const int64_t pos0 = chunk * static_cast<int64_t>(kTeam * V * N) + lane * N;
  const int64_t jstride = kTeam * N;
  const bool first = lane == 0;
  bool on[kMax];
#pragma unroll
  for (int j = 0; j < kMax; ++j) on[j] = j < V && pos0 + j * jstride < L;
  // hist: the halos this lane loads itself (every slot on the scalar path;
  // slot 0 of the chunk's first lane otherwise).
  constexpr int kOwn = kShuffle ? 1 : kMax;
  const S* xb = x + row0 * L + pos0;
  S xs[kMax][N];
  float hist[kOwn][kH];
#pragma unroll
  for (int j = 0; j < kMax; ++j) {
    if (on[j]) {
      load_raw<T, N>(xb + j * jstride, xs[j]);
    } else {
#pragma unroll
      for (int e = 0; e < N; ++e) xs[j][e] = T::from_f(0.0f);
    }
  }
#pragma unroll
  for (int j = 0; j < kOwn; ++j) {
#pragma unroll
    for (int i = 0; i < kH; ++i) hist[j][i] = 0.0f;
    if (on[j] && (!kShuffle || first)) {
      load_left<T, N, W>(p, seg, x + row0 * L, row0, pos0 + j * jstride, hist[j]);
    }
  }
  float w[W], bias = 0.0f;
  {
    const int64_t d = mod_fast(row0, p.dim);
#pragma unroll
    for (int k = 0; k < W; ++k) w[k] = load_any(seg.in(Role::kWeight), d * W + k, p.wtype);
    if (p.has_bias) bias = load_any(seg.in(Role::kBias), d, p.wtype);
  }
  S* yb = y + row0 * L + pos0;
#pragma unroll
  for (int j = 0; j < kMax; ++j) {
    float xf[N + kH];  // x̃ at pos-(W-1) .. pos+N-1
#pragma unroll
    for (int e = 0; e < N; ++e) xf[kH + e] = T::to_f(xs[j][e]);
    if constexpr (kShuffle) {
      const int src = (lane + kTeam - 1) & (kTeam - 1);
#pragma unroll
      for (int i = 0; i < kH; ++i) {
        float give = xf[N + i];  // own tail: x̃ at pos+N-(W-1)+i
        // Lane 31 also feeds lane 0 of the next slot of the same chunk.
        if (j > 0 && lane == kTeam - 1) give = T::to_f(xs[j - 1][N - kH + i]);
        const float got = gpu_shfl(give, src, kTeam);
        xf[i] = (first && j == 0) ? hist[0][i] : got;
      }
    } else {
#pragma unroll
      for (int i = 0; i < kH; ++i) xf[i] = hist[j][i];
    }
    if (on[j]) {
      float out[N];
#pragma unroll
      for (int e = 0; e < N; ++e) {
        float z = bias;
#pragma unroll
        for (int k = 0; k < W; ++k) z += w[k] * xf[e + k];
        out[e] = act_fwd(z, p.silu);
      }
      store_f<T, N>(yb + j * jstride, out);
    }
  }
  if (p.ret_final && first && chunk == nchunks - 1) write_final_cf<T, W>(p, seg, x + row0 * L, row0);
}

// Long rows of 16-bit elements on the vector path (is_stream_tile): a team
// owns one chunk of a row, per_lane steps of kTeam vectors of N = 8 elements
// (lane l holds elements l*N .. l*N+N-1 of a step), and walks the steps in
// order, as bwd_cf_stream_team does: x of the next kP steps is in flight
// while a step computes, copied asynchronously by each lane into its own
// slot of the team's ring `stage` (kP + 1 slots; the slot being filled was
// read a step earlier), so the in-flight data hold no registers. The left
// x̃ halo of a lane is the previous lane's tail by shuffle; lane 0 gets
// lane 31's tail of the previous step (lane 31 carries it; before step 0
// it holds the chunk's left halo, loaded directly). Only the row's last
// step can be partial (L % N == 0): its lanes at or past L read zeros and
// store nothing.
template <class T, int W, bool kSilu>
__device__ __forceinline__ void fwd_cf_stream_team(const KParams& p, const Conv1dSegment& seg,
                                                   int64_t local, int lane, uint4 (*stage)[kTeam]) {
  using S = typename T::S;
  constexpr int N = kVecElts<T>;
  constexpr int kH = W - 1;
  constexpr int kStep = kTeam * N;
  constexpr int kP = detail::kFwdStreamPrefetch;
  constexpr int kSlots = kP + 1;
  static_assert(N == 8, "one 16-byte vector per lane and step");
  static_assert(N > kH, "a lane's tail must hold the whole halo");
  const int64_t L = seg.seqlen;
  const int64_t nchunks = seg.nchunks;
  const int V = seg.per_lane;
  const int64_t row = div_fast(local, nchunks);
  const int64_t chunk = local - row * nchunks;
  const int64_t c0 = chunk * V * kStep;
  const int64_t rem = L - c0;
  const int nsteps = rem >= static_cast<int64_t>(V) * kStep ? V : static_cast<int>((rem + kStep - 1) / kStep);
  const bool partial = c0 + static_cast<int64_t>(nsteps) * kStep > L;  // the row's last step, partial
  const bool last = lane == kTeam - 1;
  const int src_prev = (lane + kTeam - 1) & (kTeam - 1);
  const int64_t lpos = c0 + lane * N;  // this lane's position in step 0
  // Steps in which this lane lies inside the row.
  const int lsteps = !partial ? nsteps : lpos >= L ? 0 : static_cast<int>((L - lpos + kStep - 1) / kStep);
  const S* xrow = static_cast<const S*>(seg.in(Role::kX)) + row * L;
  const S* xp = xrow + lpos;
  S* yp = static_cast<S*>(seg.out(Role::kY)) + row * L + lpos;

  // Step st's vector into slot `slot` (zeros past the chunk or the row).
  // One group per call.
  auto issue = [&](int st, int slot) {
    const bool ok = st < lsteps;
    copy16_async(&stage[slot][lane], xp + (ok ? static_cast<int64_t>(st) * kStep : 0), ok ? 16 : 0);
    copy_async_commit();
  };
#pragma unroll
  for (int q = 0; q < kP; ++q) issue(q, q);
  int rd = 0, wr = kP;  // slots of the step to compute and of the next issue
  float carry[kH];      // lane 31: x̃ left of the next step (at first, of the chunk)
#pragma unroll
  for (int i = 0; i < kH; ++i) carry[i] = 0.0f;
  if (last) load_left<T, N, W>(p, seg, xrow, row, c0, carry);
  float w[W], bias = 0.0f;
  {
    const int64_t d = mod_fast(row, p.dim);
#pragma unroll
    for (int k = 0; k < W; ++k) w[k] = load_any(seg.in(Role::kWeight), d * W + k, p.wtype);
    if (p.has_bias) bias = load_any(seg.in(Role::kBias), d, p.wtype);
  }
#pragma unroll 1
  for (int st = 0; st < nsteps; ++st) {
    copy_async_wait<kP - 1>();  // step st's group has landed
    const uint4 xb = stage[rd][lane];
    issue(st + kP, wr);
    rd = rd + 1 == kSlots ? 0 : rd + 1;
    wr = wr + 1 == kSlots ? 0 : wr + 1;
    float xf[kH + N];  // x̃ at pos-(W-1) .. pos+N-1
    {
      float xv[N];
      unpack_words<T>(xb, xv);
#pragma unroll
      for (int e = 0; e < N; ++e) xf[kH + e] = xv[e];
    }
#pragma unroll
    for (int i = 0; i < kH; ++i) {
      const float give = last ? carry[i] : xf[N + i];
      xf[i] = gpu_shfl(give, src_prev, kTeam);
      carry[i] = xf[N + i];
    }
    float out[N];
#pragma unroll
    for (int e = 0; e < N; ++e) {
      float z = bias;
#pragma unroll
      for (int k = 0; k < W; ++k) z += w[k] * xf[e + k];
      out[e] = kSilu ? silu_f(z) : z;
    }
    if (st < lsteps) store_words(yp + static_cast<int64_t>(st) * kStep, pack_words<T>(out));
  }
  copy_async_wait<0>();  // the ring is free for the team's next tile
  if (p.ret_final && lane == 0 && chunk == nchunks - 1) write_final_cf<T, W>(p, seg, xrow, row);
}

// Short rows on the vector path (rows_per_tile > 1): a team owns
// rows_per_tile (<= kTeam) consecutive rows of one segment and walks them
// kTeam / lanes_per_row rows at a time (a step: lane l holds elements
// (l % lpr) * N .. + N - 1 of row l / lpr of the step), as
// fwd_cf_stream_team walks a long row: x of the next kP steps is in flight
// while a step computes (the team's ring `stage`, kP + 1 slots). Lane l
// loads the weights, bias and initial state of the tile's row l once; a
// step fetches its rows' by shuffle. The left halo of a lane is the
// previous lane's tail, of a row's first lane the initial state (zeros
// when absent). Lanes past L or past the tile's rows store nothing. The
// tile's initial and final states (each one contiguous block of rows x
// (W-1)) move through the team's staging `sst` (kTeam * (W-1) elements)
// in coalesced passes: the lane holding a row's last vector leaves the
// row's final state there, and the team stores the block at the end, so
// host-memory states cost whole-line transfers only.
template <class T, int W>
__device__ __forceinline__ void fwd_cf_rows_team(const KParams& p, const Conv1dSegment& seg,
                                                 int64_t local, int lane, uint4 (*stage)[kTeam],
                                                 typename T::S* sst) {
  using S = typename T::S;
  constexpr int N = kVecElts<T>;
  constexpr int kH = W - 1;
  constexpr int kP = detail::kFwdShortPrefetch;
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
  const int64_t lane_off = (row_begin + sub) * L + pos;
  const int64_t step_off = static_cast<int64_t>(rps) * L;
  const S* xp = static_cast<const S*>(seg.in(Role::kX)) + lane_off;
  S* yp = static_cast<S*>(seg.out(Role::kY)) + lane_off;

  auto issue = [&](int st, int slot) {
    if (st < nsteps) {
      const bool ok = inrow && st * rps + sub < nrt;
      copy16_async(&stage[slot][lane], xp + (ok ? st * step_off : 0), ok ? 16 : 0);
    }
    copy_async_commit();
  };
#pragma unroll
  for (int q = 0; q < kP; ++q) issue(q, q);
  int rd = 0, wr = kP;

  float wl[W], bl = 0.0f, il[kH];
#pragma unroll
  for (int k = 0; k < W; ++k) wl[k] = 0.0f;
#pragma unroll
  for (int i = 0; i < kH; ++i) il[i] = 0.0f;
  if (p.has_init) {
    const int ns = nrt * kH;  // state elements of the tile
    const S* init = static_cast<const S*>(seg.in(Role::kInitialStates)) + row_begin * kH;
#pragma unroll
    for (int k = 0; k < kH; ++k) {
      const int i = lane + k * kTeam;
      if (i < ns) sst[i] = init[i];
    }
  }
  if (lane < nrt) {
    const int64_t r = row_begin + lane;
    const int64_t d = mod_fast(r, p.dim);
#pragma unroll
    for (int k = 0; k < W; ++k) wl[k] = load_any(seg.in(Role::kWeight), d * W + k, p.wtype);
    if (p.has_bias) bl = load_any(seg.in(Role::kBias), d, p.wtype);
  }
  if (p.has_init) {
    gpu_team_sync();
    if (lane < nrt) {
#pragma unroll
      for (int i = 0; i < kH; ++i) il[i] = T::to_f(sst[lane * kH + i]);
    }
  }
  gpu_team_sync();  // sst is free for the final states

#pragma unroll 1
  for (int st = 0; st < nsteps; ++st) {
    copy_async_wait<kP - 1>();  // step st's group has landed
    const uint4 xb = stage[rd][lane];
    issue(st + kP, wr);
    rd = rd + 1 == kSlots ? 0 : rd + 1;
    wr = wr + 1 == kSlots ? 0 : wr + 1;
    const int rs = st * rps + sub;  // row of the tile, and the lane holding its weights
    float w[W], bias;
#pragma unroll
    for (int k = 0; k < W; ++k) w[k] = gpu_shfl(wl[k], rs, kTeam);
    bias = gpu_shfl(bl, rs, kTeam);
    float xf[kH + N];  // x̃ at pos-(W-1) .. pos+N-1
    {
      S xs[N];
      __builtin_memcpy(xs, &xb, 16);
      if (p.ret_final && pos + N == L && rs < nrt) {  // the row's last vector
#pragma unroll
        for (int i = 0; i < kH; ++i) sst[rs * kH + i] = xs[N - kH + i];
      }
      float xv[N];
      unpack_f<T, N>(xs, xv);
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
    float out[N];
#pragma unroll
    for (int e = 0; e < N; ++e) {
      float z = bias;
#pragma unroll
      for (int k = 0; k < W; ++k) z += w[k] * xf[e + k];
      out[e] = act_fwd(z, p.silu);
    }
    if (inrow && rs < nrt) store_f<T, N>(yp + st * step_off, out);
  }
  copy_async_wait<0>();  // the ring is free for the team's next tile
  if (p.ret_final) {
    gpu_team_sync();  // every row's final state is in sst
    S* fin = static_cast<S*>(seg.out(Role::kFinalStates)) + row_begin * kH;
    const int ns = nrt * kH;
#pragma unroll
    for (int k = 0; k < kH; ++k) {
      const int i = lane + k * kTeam;
      if (i < ns) fin[i] = sst[i];
    }
  }
  gpu_team_sync();  // the team's next tile may overwrite sst
}

// 16-bit long-row vector tiles (the planner's stream range) go to
// fwd_cf_stream_kernel; fwd_cf_kernel skips them (and the stream kernel
// skips every other tile).
template <class T>
__device__ __forceinline__ bool is_stream_tile(const Conv1dSegment& seg) {
  return sizeof(typename T::S) == 2 && seg.vec && seg.rows_per_tile == 1;
}

// is_stream_tile for the stream kernel's tile check, which a team runs
// before anything else: see seg_lines_together.
template <class T>
__device__ __forceinline__ bool stream_tile_head(const Conv1dSegment& seg) {
  return is_stream_tile<T>(seg) & seg_lines_together(seg);
}

// Short-row vector tiles (the planner's short range) go to
// fwd_cf_short_kernel; fwd_cf_kernel skips them too.
__device__ __forceinline__ bool is_short_tile(const Conv1dSegment& seg) {
  return seg.vec && seg.rows_per_tile > 1;
}

template <class T, int W>
__global__ void __launch_bounds__(kTeam * kTeamsPerBlock, 3) fwd_cf_kernel(KParams p) {
  __shared__ float stage[kTeamsPerBlock][kShortRowStageFloats<W>];
  const int lane = threadIdx.x % kTeam;
  const int team = threadIdx.x / kTeam;
  auto run = [&](int64_t tile) {
    const Conv1dSegment seg = p.segs[find_segment_team(p.segs, p.nseg, tile, lane)];
    if (is_stream_tile<T>(seg) || is_short_tile(seg)) return;
    const int64_t local = tile - seg.tile_begin;
    if (seg.vec) {
      if constexpr (sizeof(typename T::S) != 2) fwd_cf_team<T, kVecElts<T>, W>(p, seg, local, lane);
    } else {
      if (seg.rows_per_tile > 1) fwd_cf_rows_staged<T, W>(p, seg, local, lane, stage[team]);
      else fwd_cf_team<T, 1, W>(p, seg, local, lane);
    }
  };
  if constexpr (sizeof(typename T::S) == 2) {
    // From p.tile_begin (the stream range split off); each team walks its
    // own tiles (no block-wide barrier), which keeps the range start out of
    // the registers of the loop (spilled otherwise at W = 4).
    const int64_t stride = static_cast<int64_t>(gridDim.x) * kTeamsPerBlock;
    for (int64_t tile = p.tile_begin + static_cast<int64_t>(blockIdx.x) * kTeamsPerBlock + team;
         tile < p.total_tiles; tile += stride) {
      run(tile);
    }
  } else {
    // fp32 plans have no stream range: every launch starts at tile 0 (and
    // skips the short range).
    for (int64_t blk = blockIdx.x; blk * kTeamsPerBlock < p.total_tiles; blk += gridDim.x) {
      const int64_t tile = blk * kTeamsPerBlock + team;
      if (tile < p.total_tiles) run(tile);
    }
  }
}

template <class T, int W>
__global__ void __launch_bounds__(kTeam * detail::kFwdStreamTeams, CONV1D_FWD_STREAM_MIN_BLOCKS)
    fwd_cf_stream_kernel(KParams p) {
  constexpr int kTeams = detail::kFwdStreamTeams;
  // Each team's ring of in-flight steps (fwd_cf_stream_team).
  __shared__ uint4 stage[kTeams][detail::kFwdStreamPrefetch + 1][kTeam];
  const int lane = threadIdx.x % kTeam;
  const int team = threadIdx.x / kTeam;
  const int64_t ntiles = p.total_tiles - p.tile_begin;
  for (int64_t blk = blockIdx.x; blk * kTeams < ntiles; blk += gridDim.x) {
    const int64_t tile = p.tile_begin + blk * kTeams + team;
    if (tile >= p.total_tiles) continue;
    const Conv1dSegment& seg = p.segs[find_segment_team(p.segs, p.nseg, tile, lane)];
    if (!stream_tile_head<T>(seg)) continue;
    if (p.silu) fwd_cf_stream_team<T, W, true>(p, seg, tile - seg.tile_begin, lane, stage[team]);
    else fwd_cf_stream_team<T, W, false>(p, seg, tile - seg.tile_begin, lane, stage[team]);
  }
}

template <class T, int W>
__global__ void __launch_bounds__(kTeam * kTeamsPerBlock, CONV1D_FWD_SHORT_MIN_BLOCKS)
    fwd_cf_short_kernel(KParams p) {
  // Each team's ring of in-flight steps and its states' staging
  // (fwd_cf_rows_team; 4 bytes per element covers every type).
  __shared__ uint4 stage[kTeamsPerBlock][detail::kFwdShortPrefetch + 1][kTeam];
  __shared__ uint32_t sstate[kTeamsPerBlock][kTeam * (W - 1)];
  const int lane = threadIdx.x % kTeam;
  const int team = threadIdx.x / kTeam;
  const int64_t ntiles = p.total_tiles - p.tile_begin;
  for (int64_t blk = blockIdx.x; blk * kTeamsPerBlock < ntiles; blk += gridDim.x) {
    const int64_t tile = p.tile_begin + blk * kTeamsPerBlock + team;
    if (tile >= p.total_tiles) continue;
    const Conv1dSegment& seg = p.segs[find_segment_team(p.segs, p.nseg, tile, lane)];
    if (!is_short_tile(seg)) continue;
    fwd_cf_rows_team<T, W>(p, seg, tile - seg.tile_begin, lane, stage[team],
                           reinterpret_cast<typename T::S*>(sstate[team]));
  }
}

// Channel-last: thread (tx, ty) of tile (b, time block, channel block) owns
// channels d0 .. d0+N-1 and time steps t0 .. t0+kSteps-1,
// in sub-chunks of kSub steps.
template <class T, int N, int W, int kSub>
__device__ __forceinline__ void fwd_cl_thread(const KParams& p, const Conv1dSegment& seg,
                                              int64_t local, int tx, int ty) {
  using S = typename T::S;
  constexpr int kSteps = detail::ClStepsFwd(sizeof(S));
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
  if constexpr (kSub >= kSteps) {
    sub(t0);
  } else {
#pragma unroll 1
    for (int64_t ts = t0; ts < t0 + kSteps && ts < L; ts += kSub) sub(ts);
  }
}

// Channel-last, 16-bit vector path: the chunk of fwd_cl_thread walked one
// step at a time, x of the next kP steps in flight as asynchronous copies
// into this thread's slots of a shared-memory ring (`ring`: slot s, thread
// th at ring[s * threads + th]), the last W-1 x̃ carried in registers.
template <class T, int N, int W, bool kSilu>
__device__ __forceinline__ void fwd_cl_ring(const KParams& p, const Conv1dSegment& seg,
                                            int64_t local, int tx, int ty, void* ring_mem) {
  using S = typename T::S;
  constexpr int kSteps = detail::ClStepsFwd(sizeof(S));
  constexpr int kP = detail::kClFwdPrefetch16;
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
  const int64_t t0 = (tb * kClRows + ty) * kSteps;
  if (dv >= nD || t0 >= L) return;
  const int64_t d0 = dv * N;
  const S* xb = static_cast<const S*>(seg.in(Role::kX)) + b * L * D + d0;
  S* yt = static_cast<S*>(seg.out(Role::kY)) + b * L * D + d0 + t0 * D;
  const int64_t left = L - t0;
  const int nsteps = left >= kSteps ? kSteps : static_cast<int>(left);
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
  const bool fin_here = p.ret_final && L - t0 <= kSteps;
  int rd = 0, wr = kP;  // slots of the step to compute and of the next issue
#pragma unroll 1
  for (int i = 0; i < nsteps; ++i) {
    copy_async_wait<kP - 1>();  // step i's group has landed
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
  }
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
__global__ void __launch_bounds__(kClCols * kClRows, detail::ClFwdMinBlocks(sizeof(typename T::S)))
    fwd_cl_kernel(KParams p) {
  using S = typename T::S;
  constexpr int N = detail::ClVecFwd(sizeof(S));
  constexpr bool kRing = sizeof(S) == 2 && detail::kClFwdPrefetch16 > 0;
  constexpr int kRingBytes = kRing ? (detail::kClFwdPrefetch16 + 1) * kClCols * kClRows * N * 2 : 16;
  __shared__ uint4 ring[kRingBytes / 16];
  const int tx = threadIdx.x % kClCols;
  const int ty = threadIdx.x / kClCols;
  for (int64_t tile = blockIdx.x; tile < p.total_tiles; tile += gridDim.x) {
    const Conv1dSegment seg = p.segs[find_segment_team(p.segs, p.nseg, tile, tx)];
    if (seg.vec) {
      if constexpr (kRing) {
        if (p.silu) fwd_cl_ring<T, N, W, true>(p, seg, tile - seg.tile_begin, tx, ty, ring);
        else fwd_cl_ring<T, N, W, false>(p, seg, tile - seg.tile_begin, tx, ty, ring);
      } else {
        fwd_cl_thread<T, N, W, detail::ClStepsFwd(sizeof(S))>(p, seg, tile - seg.tile_begin, tx, ty);
      }
    } else {
      constexpr int kSteps = detail::ClStepsFwd(sizeof(S));
      fwd_cl_thread<T, 1, W, kSteps < 8 ? kSteps : 8>(p, seg, tile - seg.tile_begin, tx, ty);
    }
  }
}

// Three kernels, each over its tile range (plan ranges may interleave;
// each kernel skips the tiles of the others): fwd_cf_short_kernel over the
// short range, fwd_cf_stream_kernel over the stream range (16-bit types),
// fwd_cf_kernel over the long range (fp32: from tile 0, which keeps its
// block loop as it was).
template <class T>
hipError_t LaunchCf(const KParams& k0, const Conv1dPlanInfo& plan, hipStream_t s) {
  if (k0.width < 2 || k0.width > 4) return hipErrorInvalidValue;
  const unsigned block = kTeam * kTeamsPerBlock;
  KParams k = k0;
  auto grid_for = [&](const KParams& kk) {
    return GridFor((kk.total_tiles - kk.tile_begin + kTeamsPerBlock - 1) / kTeamsPerBlock);
  };
  if (plan.long_tile_end > plan.long_tile_begin) {
    k.tile_begin = sizeof(typename T::S) == 2 ? plan.long_tile_begin : 0;
    k.total_tiles = plan.long_tile_end;
    const unsigned grid = grid_for(k);
    switch (k.width) {
      case 2: fwd_cf_kernel<T, 2><<<grid, block, 0, s>>>(k); break;
      case 3: fwd_cf_kernel<T, 3><<<grid, block, 0, s>>>(k); break;
      default: fwd_cf_kernel<T, 4><<<grid, block, 0, s>>>(k); break;
    }
  }
  if (plan.short_tile_end > plan.short_tile_begin) {
    k.tile_begin = plan.short_tile_begin;
    k.total_tiles = plan.short_tile_end;
    const unsigned grid = grid_for(k);
    switch (k.width) {
      case 2: fwd_cf_short_kernel<T, 2><<<grid, block, 0, s>>>(k); break;
      case 3: fwd_cf_short_kernel<T, 3><<<grid, block, 0, s>>>(k); break;
      default: fwd_cf_short_kernel<T, 4><<<grid, block, 0, s>>>(k); break;
    }
  }
  if constexpr (sizeof(typename T::S) == 2) {
    if (plan.stream_tile_end > plan.stream_tile_begin) {
      constexpr int kTeams = detail::kFwdStreamTeams;
      k.tile_begin = plan.stream_tile_begin;
      k.total_tiles = plan.stream_tile_end;
      const unsigned grid = GridFor((k.total_tiles - k.tile_begin + kTeams - 1) / kTeams);
      const unsigned sblock = kTeam * kTeams;
      switch (k.width) {
        case 2: fwd_cf_stream_kernel<T, 2><<<grid, sblock, 0, s>>>(k); break;
        case 3: fwd_cf_stream_kernel<T, 3><<<grid, sblock, 0, s>>>(k); break;
        default: fwd_cf_stream_kernel<T, 4><<<grid, sblock, 0, s>>>(k); break;
      }
    }
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
    case ScalarType::kF32: return LaunchCf<F32>(k, plan, st);
    case ScalarType::kF16: return LaunchCf<F16>(k, plan, st);
    case ScalarType::kBF16: return LaunchCf<BF16>(k, plan, st);
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
