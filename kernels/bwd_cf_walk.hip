// Backward, channel-first 16-bit rows short enough that a team walks all B
// rows of a channel, for one or several consecutive channels, and stores
// their dweight/dbias itself (bwd_cf_walk_kernel; no partials).
#include "kernels/bwd_common.h"

namespace conv1d::kernels::dev {
namespace {

using detail::kClCols;
using detail::kClRows;
using detail::kTeam;
using detail::kTeamsPerBlock;
using detail::WidthSwitch;

// A walked stream segment (ws_partial_offset == kWsWalked; the planner:
// whole rows, and the B rows of a channel together at most kBwdWalkSteps
// steps): the team of tile t walks the channels_per_tile channels from
// d0 = t * channels_per_tile on (fewer in the last tile), channel after
// channel and, within a channel d, rows d, D+d, .. (B-1)*D+d, the ring
// running on across the row and channel boundaries, and stores each
// channel's dweight and dbias itself (no partials, no reduce_dw_kernel).
// A channel's weights are loaded while the channel before it runs. Within
// a row the steps are those of bwd_cf_stream_team with the chunk being the
// whole row (no tail group: g past the row is zero). dweight/dbias: per
// lane over all steps of the channel's rows in order, then one team sum,
// stored by store_channel_dw.
// kShift (seg.vec == kVecShifted): rows of any length, each on the
// 16-byte grid that starts o elements before it (o from the row's own
// address, so it changes from row to row), with the range checks of
// bwd_cf_stream_team's shifted rows: x̃ before the row and zeros past it,
// dout outside the row zero, dx of the vectors that straddle the row's
// ends (or meet dfinal_states) stored element by element.
template <class T, int W, bool kSilu, bool kShift>
__device__ __forceinline__ void bwd_cf_stream_walk(const KParams& p, const Conv1dSegment& seg,
                                                   int64_t tile, int lane, uint4 (*stage)[2][kTeam]) {
  using S = typename T::S;
  constexpr int N = kVecElts<T>;
  constexpr int kH = W - 1;
  constexpr int kStep = kTeam * N;
  constexpr int kP = detail::kBwdStreamPrefetch;
  constexpr int kSlots = kP + 1;
  static_assert(N == 8, "one 16-byte vector per lane and step");
  static_assert(N > kH, "a lane's tail must hold the whole halo");
  const int64_t L = seg.seqlen;
  const int64_t B = seg.batch;
  const int64_t d0 = tile * seg.channels_per_tile;
  const int64_t left = p.dim - d0;
  const int nch = left < seg.channels_per_tile ? static_cast<int>(left) : seg.channels_per_tile;
  const bool first = lane == 0;
  const bool last = lane == kTeam - 1;
  const int src_prev = (lane + kTeam - 1) & (kTeam - 1);
  const int src_next = (lane + 1) & (kTeam - 1);
  const int lpos = lane * N;  // this lane's grid position in a row's step 0
  const S* x = static_cast<const S*>(seg.in(Role::kX));
  // A row's steps on its grid (o: elements of the grid before the row) and
  // the steps in which this lane lies inside it.
  struct Span {
    int o, nsteps, lsteps;
  };
  auto span_of = [&](int64_t r) {
    Span sp;
    sp.o = kShift ? row_shift(x + r * L) : 0;
    const int64_t lg = L + sp.o;  // the row's end on the grid
    sp.nsteps = static_cast<int>((lg + kStep - 1) / kStep);
    sp.lsteps = static_cast<int64_t>(sp.nsteps) * kStep <= lg ? sp.nsteps
                : lpos >= lg                                 ? 0
                                                             : static_cast<int>((lg - lpos + kStep - 1) / kStep);
    return sp;
  };
  const S* xp = x + lpos;
  const S* dp = static_cast<const S*>(seg.in(Role::kDout)) + lpos;
  S* dxp = static_cast<S*>(seg.out(Role::kDx)) + lpos;

  // The next step to issue: channel ic of the tile, row ib, step ist of
  // the row at irow = ib * D + d0 + ic (zeros once past the tile's last row
  // or, in a partial last step, past the row). One group per call.
  int ic = 0, ist = 0;
  int64_t ib = 0, irow = d0;
  Span isp = span_of(irow);
  int64_t ioff = irow * L - isp.o;  // the issued row's grid start
  auto issue = [&](int slot) {
    const bool ok = ic < nch && ist < isp.lsteps;
    const int64_t off = ok ? ioff + static_cast<int64_t>(ist) * kStep : 0;
    copy16_async(&stage[slot][0][lane], xp + off, ok ? 16 : 0);
    copy16_async(&stage[slot][1][lane], dp + off, ok ? 16 : 0);
    copy_async_commit();
    if (++ist == isp.nsteps) {
      ist = 0;
      if (++ib == B) {
        ib = 0;
        ++ic;
        irow = d0 + ic;
      } else {
        irow += p.dim;
      }
      if constexpr (kShift) isp = span_of(irow);
      ioff = irow * L - isp.o;
    }
  };
#pragma unroll
  for (int q = 0; q < kP; ++q) issue(q);
  int rd = 0, wr = kP;
  // This channel's weights and bias (w, bias) and the next channel's (wn, bn).
  float w[W], bias = 0.0f, wn[W] = {}, bn = 0.0f;
  auto load_weights = [&](int64_t d, float (&wv)[W], float& bv) {
#pragma unroll
    for (int k = 0; k < W; ++k) wv[k] = load_any(seg.in(Role::kWeight), d * W + k, p.wtype);
    if (p.has_bias) bv = load_any(seg.in(Role::kBias), d, p.wtype);
  };
  load_weights(d0, w, bias);

  float dw[W + 1];  // [W] is dbias
  float carry[kH];  // lane 31: x̃ left of the next step
  float gc[N];      // g of the previous step
  int64_t row = d0;
  Span sp = span_of(row);
  S* dxr = dxp;            // this row's grid start in dx
  const S* xrow = x;       // this row in x
  // dx of step st of the row (g in gc, its right halo gh), with
  // dfinal_states near the row's end and, from the vector that holds
  // t = 0, dinitial_states. Whole vectors where the step is inside the row
  // and clear of dfinal_states (always so for rows of whole vectors but
  // in their last step), else element by element.
  auto finish = [&](bool maybe_last, int st, const float (&gh)[kH]) {
    float dxv[N];
#pragma unroll
    for (int e = 0; e < N; ++e) dxv[e] = dx_of_g<W, N>(w, gc, gh, e);
    const int64_t t0 = lpos - sp.o + static_cast<int64_t>(st) * kStep;
    store_dx_vector<T, W, N>(p, seg, row, L, t0, !kShift && !maybe_last, dxv,
                             dxr + static_cast<int64_t>(st) * kStep);
    if (p.ret_dinit && t0 <= 0 && t0 + N > 0) {
      // g at t is element t - t0 of gc then gh (walked rows are longer
      // than W - 1, so dfinal_states never reaches dinitial_states).
      float g0[kH];  // g at t = 0 .. kH-1
      window_at(gc, gh, static_cast<int>(-t0), g0);
      store_dinit_row<T, W>(static_cast<S*>(seg.out(Role::kDinitialStates)) + row * kH, w, g0);
    }
  };
  auto step = [&](auto first_step, int st) {
    constexpr bool kFirstStep = decltype(first_step)::value;
    copy_async_wait<kP - 1>();  // this step's group has landed
    const uint4 xb = stage[rd][0][lane];
    const uint4 db = stage[rd][1][lane];
    issue(wr);
    rd = rd + 1 == kSlots ? 0 : rd + 1;
    wr = wr + 1 == kSlots ? 0 : wr + 1;
    float xf[kH + N];  // x̃ at pos-(W-1) .. pos+N-1
    float dv[N];
    {
      float xv[N];
      unpack_words<T>(xb, xv);
#pragma unroll
      for (int e = 0; e < N; ++e) xf[kH + e] = xv[e];
    }
    unpack_words<T>(db, dv);
    if constexpr (kShift) {
      mask_outside_row<T, N, kH>(p, seg, xrow, row, lpos - sp.o + static_cast<int64_t>(st) * kStep, L, W, dv, xf);
    }
#pragma unroll
    for (int i = 0; i < kH; ++i) {
      const float give = last ? carry[i] : xf[N + i];
      xf[i] = gpu_shfl(give, src_prev, kTeam);
      carry[i] = xf[N + i];
    }
    float gs[N];
#pragma unroll
    for (int e = 0; e < N; ++e) {
      float gv = dv[e];
      if constexpr (kSilu) {
        gv = silu_backward_f(dv[e], preact(w, bias, xf, e));
      }
      gs[e] = gv;
      dw[W] += gv;
#pragma unroll
      for (int k = 0; k < W; ++k) dw[k] += gv * xf[e + k];
    }
    if constexpr (!kFirstStep) {
      // Step st-1 is not the row's last.
      float gh[kH];
#pragma unroll
      for (int i = 0; i < kH; ++i) gh[i] = gpu_shfl(first ? gs[i] : gc[i], src_next, kTeam);
      finish(false, st - 1, gh);
    }
#pragma unroll
    for (int e = 0; e < N; ++e) gc[e] = gs[e];
  };
#pragma unroll 1
  for (int c = 0; c < nch; ++c) {
    if (c + 1 < nch) load_weights(d0 + c + 1, wn, bn);  // used from the next channel on
#pragma unroll
    for (int k = 0; k <= W; ++k) dw[k] = 0.0f;
    row = d0 + c;
#pragma unroll 1
    for (int64_t b = 0; b < B; ++b) {
      xrow = x + row * L;
      if constexpr (kShift) sp = span_of(row);
      dxr = dxp + (row * L - sp.o);
#pragma unroll
      for (int i = 0; i < kH; ++i) carry[i] = 0.0f;
      if (last && p.has_init) load_left<T, N, W>(p, seg, xrow, row, -sp.o, carry);
      step(detail::Bool<true>{}, 0);
#pragma unroll 1
      for (int s0 = 1; s0 < sp.nsteps; s0 += 2) {
        step(detail::Bool<false>{}, s0);
        if (s0 + 1 < sp.nsteps) step(detail::Bool<false>{}, s0 + 1);
      }
      // The row's last step: g past the row is zero.
      float gh[kH];
#pragma unroll
      for (int i = 0; i < kH; ++i) {
        gh[i] = gpu_shfl(gc[i], src_next, kTeam);
        if (last) gh[i] = 0.0f;
      }
      if (sp.nsteps <= sp.lsteps) finish(true, sp.nsteps - 1, gh);
      row += p.dim;
    }
    float v[W + 1];
#pragma unroll
    for (int k = 0; k <= W; ++k) v[k] = team_sum(dw[k]);
    if (first) store_channel_dw<W>(p, seg, d0 + c, v);
#pragma unroll
    for (int k = 0; k < W; ++k) w[k] = wn[k];
    bias = bn;
  }
  copy_async_wait<0>();  // the ring is free for the team's next tile
}

// The walk range: bwd_cf_stream_walk, channels_per_tile channels per
// tile (its own kernel, so that bwd_cf_stream_kernel keeps its register
// allocation).
template <class T, int W>
__global__ void __launch_bounds__(kTeam * detail::kBwdWalkTeams, detail::BwdWalkTraits::kMinBlocks)
    bwd_cf_walk_kernel(KParams p) {
  gpu_allow_dependents();  // the next launch may take the SMs this one frees
  constexpr int kTeams = detail::kBwdWalkTeams;
  __shared__ uint4 stage[kTeams][detail::kBwdStreamPrefetch + 1][2][kTeam];
  const int lane = threadIdx.x % kTeam;
  const int team = threadIdx.x / kTeam;
  const int64_t ntiles = p.total_tiles - p.tile_begin;
  for (int64_t blk = blockIdx.x; blk * kTeams < ntiles; blk += gridDim.x) {
    const int64_t tile = p.tile_begin + blk * kTeams + team;
    if (tile >= p.total_tiles) continue;
    const Conv1dSegment& seg = p.segs[find_tile_segment(p, tile, lane)];
    // See seg_lines_together.
    if (!(is_stream_tile(seg) & (seg.ws_partial_offset == kWsWalked) & seg_lines_together(seg))) continue;
    const bool shift = seg.vec == kVecShifted;
    BoolSwitch(p.silu, [&](auto silu) {
      constexpr bool kSilu = decltype(silu)::value;
      if (shift) bwd_cf_stream_walk<T, W, kSilu, true>(p, seg, tile - seg.tile_begin, lane, stage[team]);
      else bwd_cf_stream_walk<T, W, kSilu, false>(p, seg, tile - seg.tile_begin, lane, stage[team]);
    });
  }
  gpu_exit_after_prerequisites();  // see LaunchKernel
}


}  // namespace

template <class T>
hipError_t LaunchBwdCfWalk(const KParams& k, hipStream_t s) {
  constexpr int kTeams = detail::kBwdWalkTeams;
  unsigned grid = GridFor((k.total_tiles - k.tile_begin + kTeams - 1) / kTeams);
  hipError_t e = hipSuccess;
  const bool launched = WidthSwitch(k.width, [&](auto w) {
    e = LaunchKernel(k.after_previous, bwd_cf_walk_kernel<T, decltype(w)::value>, grid, kTeam * kTeams, s, k);
  });
  return launched ? e : hipErrorInvalidValue;
}

template hipError_t LaunchBwdCfWalk<F16>(const KParams&, hipStream_t);
template hipError_t LaunchBwdCfWalk<BF16>(const KParams&, hipStream_t);

}  // namespace conv1d::kernels::dev
