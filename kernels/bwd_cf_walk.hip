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
template <class T, int W, bool kSilu>
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
  const int64_t rstride = p.dim * L;  // between the rows of one channel
  const int64_t d0 = tile * seg.channels_per_tile;
  const int64_t left = p.dim - d0;
  const int nch = left < seg.channels_per_tile ? static_cast<int>(left) : seg.channels_per_tile;
  const int nsteps = static_cast<int>((L + kStep - 1) / kStep);
  const bool partial = static_cast<int64_t>(nsteps) * kStep > L;
  const bool first = lane == 0;
  const bool last = lane == kTeam - 1;
  const int src_prev = (lane + kTeam - 1) & (kTeam - 1);
  const int src_next = (lane + 1) & (kTeam - 1);
  const int64_t lpos = lane * N;
  const int lsteps = !partial ? nsteps : lpos >= L ? 0 : static_cast<int>((L - lpos + kStep - 1) / kStep);
  const S* xp = static_cast<const S*>(seg.in(Role::kX)) + d0 * L + lpos;
  const S* dp = static_cast<const S*>(seg.in(Role::kDout)) + d0 * L + lpos;
  S* dxp = static_cast<S*>(seg.out(Role::kDx)) + d0 * L + lpos;

  // The next step to issue: channel ic of the tile, row ib, step ist
  // (zeros once past the tile's last row or, in a partial last step, past
  // L). One group per call.
  int ic = 0, ist = 0;
  int64_t ib = 0, cbase = 0, ioff = 0;  // cbase = ic * L, ioff = cbase + ib * rstride
  auto issue = [&](int slot) {
    const bool ok = ic < nch && ist < lsteps;
    const int64_t off = ok ? ioff + static_cast<int64_t>(ist) * kStep : 0;
    copy16_async(&stage[slot][0][lane], xp + off, ok ? 16 : 0);
    copy16_async(&stage[slot][1][lane], dp + off, ok ? 16 : 0);
    copy_async_commit();
    if (++ist == nsteps) {
      ist = 0;
      if (++ib == B) {
        ib = 0;
        ++ic;
        cbase += L;
        ioff = cbase;
      } else {
        ioff += rstride;
      }
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
  auto dx_of = [&](const float (&gh)[kH], float (&dxv)[N]) {
#pragma unroll
    for (int e = 0; e < N; ++e) {
      float acc = 0.0f;
#pragma unroll
      for (int k = 0; k < W; ++k) {
        const int idx = e + kH - k;
        acc += w[k] * (idx < N ? gc[idx < N ? idx : 0] : gh[idx >= N ? idx - N : 0]);
      }
      dxv[e] = acc;
    }
  };
  int64_t row = d0;
  S* dxr = dxp;  // this row's dx
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
    if constexpr (kFirstStep) {
      if (p.ret_dinit && first) {
        // L > kTeam * N (stream rows), so dfinal_states never reaches here.
        store_dinit_row<T, W>(static_cast<S*>(seg.out(Role::kDinitialStates)) + row * kH, w, gs);
      }
    } else {
      // Step st-1 is full and not the row's last: no range checks, no dfinal.
      float gh[kH];
#pragma unroll
      for (int i = 0; i < kH; ++i) gh[i] = gpu_shfl(first ? gs[i] : gc[i], src_next, kTeam);
      float dxv[N];
      dx_of(gh, dxv);
      store_words(dxr + static_cast<int64_t>(st - 1) * kStep, pack_words<T>(dxv));
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
    dxr = dxp + c * L;
#pragma unroll 1
    for (int64_t b = 0; b < B; ++b) {
#pragma unroll
      for (int i = 0; i < kH; ++i) carry[i] = 0.0f;
      if (last && p.has_init) {
        load_left<T, N, W>(p, seg, static_cast<const S*>(seg.in(Role::kX)) + row * L, row, 0, carry);
      }
      step(detail::Bool<true>{}, 0);
#pragma unroll 1
      for (int s0 = 1; s0 < nsteps; s0 += 2) {
        step(detail::Bool<false>{}, s0);
        if (s0 + 1 < nsteps) step(detail::Bool<false>{}, s0 + 1);
      }
      // The row's last step: g past the row is zero.
      float gh[kH];
#pragma unroll
      for (int i = 0; i < kH; ++i) {
        gh[i] = gpu_shfl(gc[i], src_next, kTeam);
        if (last) gh[i] = 0.0f;
      }
      if (nsteps <= lsteps) {
        const int64_t pos = lpos + static_cast<int64_t>(nsteps - 1) * kStep;
        float dxv[N];
        dx_of(gh, dxv);
        if (p.has_dfinal && pos + N == L) {
          const S* dfin = static_cast<const S*>(seg.in(Role::kDfinalStates)) + row * kH;
#pragma unroll
          for (int i = 0; i < kH; ++i) dxv[N - kH + i] += T::to_f(dfin[i]);
        }
        store_words(dxr + static_cast<int64_t>(nsteps - 1) * kStep, pack_words<T>(dxv));
      }
      row += p.dim;
      dxr += rstride;
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
    BoolSwitch(p.silu, [&](auto silu) {
      bwd_cf_stream_walk<T, W, decltype(silu)::value>(p, seg, tile - seg.tile_begin, lane, stage[team]);
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
