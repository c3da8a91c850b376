// Backward, channel-first long rows on the vector path, every type
// (bwd_cf_stream_kernel): a team walks one chunk of a row with the loads of
// the next steps in flight in a shared-memory ring; rows of any length on
// the shifted vector grid (kVecShifted).
//
// The family's kernel and launcher; each element type is instantiated in
// its own source (bwd_cf_stream_{f32,f16,bf16}.hip), since the family is
// the slowest of all to compile (its kernels per width, activation and
// grid) and one source per type lets builds run them in parallel. Include
// from those sources only. Device code; no state.
#ifndef CONV1D_KERNELS_BWD_CF_STREAM_H_
#define CONV1D_KERNELS_BWD_CF_STREAM_H_

#include "kernels/bwd_common.h"

namespace conv1d::kernels::dev {
namespace {

using detail::kTeam;
using detail::kTeamsPerBlock;
using detail::WidthSwitch;

// Long rows on the vector path (is_stream_tile): a team owns one chunk of a
// row, per_lane steps of kTeam 16-byte vectors of N elements (8 in 16-bit
// types, 4 in fp32; lane l holds elements l*N .. l*N+N-1 of a step), and
// walks the steps in order. x and dout of the next kP steps are in flight
// while it computes the current one: each lane copies its vectors
// asynchronously into its own slots of the team's ring `stage` (kP + 1
// slots, so the slot being filled was read a step earlier), which keeps
// them out of registers. Per step:
//  - left x̃ halo of a lane: the previous lane's tail by shuffle; lane 0
//    gets lane 31's tail of the previous step (lane 31 carries it; before
//    step 0 it holds the chunk's left halo, loaded directly);
//  - g once per element; dweight/dbias summed per lane over the whole chunk
//    (one team sum at the end, a partial per (row, chunk) as elsewhere);
//  - dx of step s-1, now that g of step s is known: its right g halo comes
//    from the next lane, lane 31's from lane 0 of step s.
// After the last step, lane 31 computes the chunk's right g halo itself
// from the x and dout vector just past the chunk (zero past L), which it
// copies in the slot a step after the last would have used.
// Halos longer than a vector (fp32 at W = 6..8, kTwo) come from two lanes:
// every lane keeps its x vector of the previous step in `carry` (lanes 30
// and 31 at first: the x̃ before the chunk), and lanes 30 and 31 feed the
// x̃ halos of lanes 0 and 1 of the next step from it; the right g halos of
// lanes 30 and 31 come from lanes 0 and 1 of the next step, and at the
// chunk's end from g of the kH elements past it, which lane 31 computes
// from x and dout read directly.
// Only the row's last step can be partial: its lanes at or past L get
// zeros (dout = 0, so g = 0 for finite x̃) and store nothing.
// Shifted rows (seg.vec == kVecShifted; L not a whole number of vectors):
// the steps sit on the 16-byte grid that starts o = (row start mod 16
// bytes) elements before the row. In the vectors that straddle the row's
// ends, x before the row is replaced by x̃ (initial state or zero) and past
// it by zero, dout outside the row by zero, and dx is stored element by
// element; dfinal_states may then reach into the step before the last.
// kShift (seg.vec == kVecShifted) compiles those range checks in; rows of
// whole vectors (kShift false) store every step but the row's last whole.
template <class T, int W, bool kSilu, bool kShift>
__device__ __forceinline__ void bwd_cf_stream_team(const KParams& p, const Conv1dSegment& seg,
                                                   int64_t local, int lane,
                                                   uint4 (*stage)[2][kTeam]) {
  using S = typename T::S;
  constexpr int N = kVecElts<T>;
  constexpr int kH = W - 1;
  constexpr int kStep = kTeam * N;
  constexpr int kP = detail::kBwdStreamPrefetch;
  constexpr int kSlots = kP + 1;
  constexpr bool kTwo = kH > N;  // both halos from two lanes
  static_assert(kH <= 2 * N, "a halo of at most two lanes' vectors");
  static_assert(kP >= 1, "at least one step in flight");
  const int64_t L = seg.seqlen;
  const int64_t nchunks = seg.nchunks;
  const int V = seg.per_lane;
  const int64_t row = div_fast(local, nchunks);
  const int64_t chunk = local - row * nchunks;
  const S* xrow = static_cast<const S*>(seg.in(Role::kX)) + row * L;
  // Positions below are on the grid (row position + o).
  const int o = kShift ? row_shift(xrow) : 0;
  const int64_t Lg = L + o;  // the row's end on the grid
  const int64_t c0 = chunk * V * kStep;
  const int64_t rem = Lg - c0;
  const int nsteps = rem >= static_cast<int64_t>(V) * kStep ? V : static_cast<int>((rem + kStep - 1) / kStep);
  const int64_t cend = c0 + static_cast<int64_t>(nsteps) * kStep;
  const bool partial = cend > Lg;  // the row's last step, partial
  const bool more = cend < Lg;     // the row goes on past the chunk
  const bool first = lane == 0;
  const bool last = lane == kTeam - 1;
  const int src_prev = (lane + kTeam - 1) & (kTeam - 1);
  const int src_next = (lane + 1) & (kTeam - 1);
  const int src_next2 = (lane + 2) & (kTeam - 1);
  const int64_t lpos = c0 + lane * N;  // this lane's position in step 0
  // Steps in which this lane lies inside the row.
  const int lsteps = !partial ? nsteps : lpos >= Lg ? 0 : static_cast<int>((Lg - lpos + kStep - 1) / kStep);
  const int64_t rbase = row * L - o + lpos;
  const S* xp = static_cast<const S*>(seg.in(Role::kX)) + rbase;
  const S* dp = static_cast<const S*>(seg.in(Role::kDout)) + rbase;
  S* dxp = static_cast<S*>(seg.out(Role::kDx)) + rbase;
  // Row position of this lane's first element in step st.
  auto tpos = [&](int st) { return lpos - o + static_cast<int64_t>(st) * kStep; };
  // The row's weights and bias: loaded before the ring's first copies and
  // converted after them and the carry's loads, so that these latencies
  // overlap (each is a chain of dependent loads from the segment table on).
  uint32_t wbits[W], bbits = 0;
  {
    const int64_t d = mod_fast(row, p.dim);
    const void* wsrc = seg.in(Role::kWeight);
    const void* bsrc = seg.in(Role::kBias);
#pragma unroll
    for (int k = 0; k < W; ++k) wbits[k] = load_bits(wsrc, d * W + k, p.wtype);
    if (p.has_bias) bbits = load_bits(bsrc, d, p.wtype);
  }

  // Step st's vectors into slot `slot` (st < nsteps), or for st == nsteps
  // lane 31's vectors just past the chunk (when inside the row); zeros
  // where there is nothing to read. One group per call.
  auto issue = [&](int st, int slot) {
    const bool tail = !kTwo && st == nsteps && last && more;
    const bool ok = st < nsteps ? !partial || st < lsteps : tail;
    const int64_t off = ok ? static_cast<int64_t>(st) * kStep - (tail ? (kTeam - 1) * N : 0) : 0;
    copy16_async(&stage[slot][0][lane], xp + off, ok ? 16 : 0);
    copy16_async(&stage[slot][1][lane], dp + off, ok ? 16 : 0);
    copy_async_commit();
  };
#pragma unroll
  for (int q = 0; q < kP; ++q) issue(q, q);
  int rd = 0, wr = kP;  // slots of the step to compute and of the next issue
  // One lane: lane 31's x̃ left of the next step (at first, of the
  // chunk). Two lanes: each lane's vector of the previous step (lanes 30
  // and 31 at first: the x̃ before the chunk, which the halos reach).
  constexpr int kCarry = kTwo ? N : kH;
  float carry[kCarry];
#pragma unroll
  for (int i = 0; i < kCarry; ++i) carry[i] = 0.0f;
  if constexpr (kTwo) {
    if (lane >= kTeam - 2) {
#pragma unroll
      for (int e = 0; e < N; ++e) carry[e] = x_tilde_cf<T>(p, seg, xrow, row, lpos - kStep + e - o, W);
    }
  } else {
    if (last) load_left<T, N, W>(p, seg, xrow, row, c0 - o, carry);
  }
  float w[W], bias = 0.0f;
#pragma unroll
  for (int k = 0; k < W; ++k) w[k] = bits_to_float(wbits[k], p.wtype);
  if (p.has_bias) bias = bits_to_float(bbits, p.wtype);

  float dw[W + 1];  // [W] is dbias
#pragma unroll
  for (int k = 0; k <= W; ++k) dw[k] = 0.0f;
  float gc[N];  // g of the previous step
  // dx of step st (g in gc, its right halo gh) into dx, with dfinal_states
  // near the row's end, element by element where the vector straddles the
  // row's ends; and dinitial_states from the vector that holds t = 0.
  // maybe_last false: not the row's last step, so for rows of whole
  // vectors (kShift false) a whole vector inside the row.
  auto finish = [&](bool maybe_last, int st, const float (&gh)[kH]) {
    float dxv[N];
#pragma unroll
    for (int e = 0; e < N; ++e) dxv[e] = dx_of_g<W, N>(w, gc, gh, e);
    const int64_t t0 = tpos(st);
    // Whole vectors: inside the row and clear of dfinal_states (always so
    // on rows of whole vectors but for their last step, when the halo is
    // within a vector; a longer one may reach into the step before).
    store_dx_vector<T, W, N>(p, seg, row, L, t0, !kShift && !kTwo && !maybe_last, dxv,
                             dxp + static_cast<int64_t>(st) * kStep);
    if (p.ret_dinit && (kShift || st == 0) && t0 <= 0 && t0 + N > 0) {
      // g at t is element t + o of gc then gh (L > kTeam, so dfinal_states
      // never reaches dinitial_states).
      const int sh = kShift ? static_cast<int>(-t0) : 0;
      float g0[kH];  // g at t = 0 .. kH-1
      window_at(gc, gh, sh, g0);
      store_dinit_row<T, W>(static_cast<S*>(seg.out(Role::kDinitialStates)) + row * kH, w, g0);
    }
  };
  auto step = [&](auto first_step, int st) {
    constexpr bool kFirstStep = decltype(first_step)::value;
    copy_async_wait<kP - 1>();  // step st's group has landed
    const uint4 xb = stage[rd][0][lane];
    const uint4 db = stage[rd][1][lane];
    issue(st + kP, wr);
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
    if constexpr (kShift) mask_outside_row<T, N, kH>(p, seg, xrow, row, tpos(st), L, W, dv, xf);
    if constexpr (kTwo) {
      const int src2 = (lane + kTeam - 2) & (kTeam - 1);
#pragma unroll
      for (int i = 0; i < kH; ++i) {
        const int back = kH - i;       // elements before pos
        const bool one = back <= N;    // in the previous lane's vector, else the one before
        const int e = one ? N - back : 2 * N - back;
        const bool wrap = lane >= kTeam - (one ? 1 : 2);  // feeds lane 0 or 1 of the next step
        xf[i] = gpu_shfl(wrap ? carry[e] : xf[kH + e], one ? src_prev : src2, kTeam);
      }
#pragma unroll
      for (int e = 0; e < N; ++e) carry[e] = xf[kH + e];
    } else {
#pragma unroll
      for (int i = 0; i < kH; ++i) {
        const float give = last ? carry[i] : xf[N + i];
        xf[i] = gpu_shfl(give, src_prev, kTeam);
        carry[i] = xf[N + i];
      }
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
      // (Past a vector, from two lanes on: lanes 30 and 31 get lanes 0 and
      // 1 of step st.)
      float gh[kH];
#pragma unroll
      for (int i = 0; i < kH; ++i) {
        gh[i] = i < N ? gpu_shfl(first ? gs[i] : gc[i], src_next, kTeam)
                      : gpu_shfl(lane < 2 ? gs[i - N] : gc[i - N], src_next2, kTeam);
      }
      finish(false, st - 1, gh);
    }
#pragma unroll
    for (int e = 0; e < N; ++e) gc[e] = gs[e];
  };
  step(detail::Bool<true>{}, 0);
  // Two steps per iteration, so that g of the previous step needs no
  // register copy at the loop edge.
#pragma unroll 1
  for (int s0 = 1; s0 < nsteps; s0 += 2) {
    step(detail::Bool<false>{}, s0);
    if (s0 + 1 < nsteps) step(detail::Bool<false>{}, s0 + 1);
  }
  {
    // The last step; lane 31's right halo (from two lanes on, lane 30's
    // too) is g just past the chunk.
    copy_async_wait<kP - 1>();  // the tail group has landed
    float gh[kH];
#pragma unroll
    for (int i = 0; i < kH; ++i) {
      gh[i] = i < N ? gpu_shfl(gc[i], src_next, kTeam) : gpu_shfl(gc[i - N], src_next2, kTeam);
    }
    if constexpr (kTwo) {
      // Two vectors past the chunk: lane 31 computes g there from x and
      // dout read directly (zero past L; once per chunk) and hands lane 30
      // its part.
      float gfar[kH];
#pragma unroll
      for (int i = 0; i < kH; ++i) gfar[i] = 0.0f;
      if (last && more) {
        const S* drow = static_cast<const S*>(seg.in(Role::kDout)) + row * L;
        const int64_t t0 = cend - o;  // the row position just past the chunk (> kH)
        float xr[2 * kH];             // x at t0 - kH .. t0 + kH - 1
#pragma unroll
        for (int j = 0; j < 2 * kH; ++j) {
          const int64_t t = t0 - kH + j;
          xr[j] = t < L ? T::to_f(xrow[t]) : 0.0f;
        }
#pragma unroll
        for (int i = 0; i < kH; ++i) {
          if (t0 + i < L) {
            const float dv = T::to_f(drow[t0 + i]);
            float gv = dv;
            if constexpr (kSilu) {
              gv = silu_backward_f(dv, preact(w, bias, xr, i));
            }
            gfar[i] = gv;
          }
        }
      }
#pragma unroll
      for (int i = 0; i < kH - N; ++i) {
        const float g = gpu_shfl(gfar[i], kTeam - 1, kTeam);
        if (lane == kTeam - 2) gh[N + i] = g;
      }
      if (last) {
#pragma unroll
        for (int i = 0; i < kH; ++i) gh[i] = gfar[i];
      }
    } else if (last) {
      float xn[N], dn[N];
      unpack_words<T>(stage[rd][0][lane], xn);
      unpack_words<T>(stage[rd][1][lane], dn);
#pragma unroll
      for (int i = 0; i < kH; ++i) {
        float gv = dn[i];
        if constexpr (kSilu) {
          float z = bias;
#pragma unroll
          for (int k = 0; k < W; ++k) {
            const int idx = i + k;  // x̃ at cend - kH + idx
            z += w[k] * (idx < kH ? carry[idx < kH ? idx : 0] : xn[idx >= kH ? idx - kH : 0]);
          }
          gv = silu_backward_f(dn[i], z);
        }
        // Zero past L (the vector past the chunk may straddle the row's end).
        gh[i] = more && cend - o + i < L ? gv : 0.0f;
      }
    }
    if (nsteps <= lsteps) finish(true, nsteps - 1, gh);
  }
  copy_async_wait<0>();  // the ring is free for the team's next tile
  float v[W + 1];
#pragma unroll
  for (int k = 0; k <= W; ++k) v[k] = team_sum(dw[k]);
  if (first) {
    const int64_t d = mod_fast(row, p.dim), b = div_fast(row, p.dim);
    if (seg.ws_partial_offset < 0) {
      // kWsDirect: the row is the channel's only one and a single chunk.
      store_channel_dw<W>(p, seg, d, v);
    } else {
      float* mine = p.partials + seg.ws_partial_offset +
                    (d * (seg.batch * nchunks) + b * nchunks + chunk) * (W + 1);
#pragma unroll
      for (int k = 0; k <= W; ++k) mine[k] = v[k];
    }
  }
}

template <class T, int W>
__global__ void __launch_bounds__(kTeam * kTeamsPerBlock, detail::BwdStreamTraits::kMinBlocks)
    bwd_cf_stream_kernel(KParams p) {
  gpu_allow_dependents();  // the next launch may take the SMs this one frees
  // Each team's ring of in-flight steps (bwd_cf_stream_team).
  __shared__ uint4 stage[kTeamsPerBlock][detail::kBwdStreamPrefetch + 1][2][kTeam];
  const int lane = threadIdx.x % kTeam;
  const int team = threadIdx.x / kTeam;
  const int64_t ntiles = p.total_tiles - p.tile_begin;
  for (int64_t blk = blockIdx.x; blk * kTeamsPerBlock < ntiles; blk += gridDim.x) {
    const int64_t tile = p.tile_begin + blk * kTeamsPerBlock + team;
    if (tile >= p.total_tiles) continue;
    const Conv1dSegment& seg = p.segs[find_tile_segment(p, tile, lane)];
    if (!is_stream_tile(seg) || seg.ws_partial_offset == kWsWalked) continue;
    const int64_t local = tile - seg.tile_begin;
    const bool shift = seg.vec == kVecShifted;
    BoolSwitch(p.silu, [&](auto silu) {
      constexpr bool kSilu = decltype(silu)::value;
      if (shift) bwd_cf_stream_team<T, W, kSilu, true>(p, seg, local, lane, stage[team]);
      else bwd_cf_stream_team<T, W, kSilu, false>(p, seg, local, lane, stage[team]);
    });
  }
  gpu_exit_after_prerequisites();  // see LaunchKernel
}


// The launcher of LaunchBwdCfStream<T> (bwd_common.h), which each type's
// source defines as this.
template <class T>
hipError_t LaunchBwdCfStreamOf(const KParams& k, hipStream_t s) {
  constexpr int kTeams = kTeamsPerBlock;
  unsigned grid = GridFor((k.total_tiles - k.tile_begin + kTeams - 1) / kTeams);
  hipError_t e = hipSuccess;
  const bool launched = WidthSwitch(k.width, [&](auto w) {
    e = LaunchKernel(k.after_previous, bwd_cf_stream_kernel<T, decltype(w)::value>, grid, kTeam * kTeams, s, k);
  });
  return launched ? e : hipErrorInvalidValue;
}

}  // namespace
}  // namespace conv1d::kernels::dev

#endif  // CONV1D_KERNELS_BWD_CF_STREAM_H_
