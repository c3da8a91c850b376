// Forward, channel-first 16-bit rows that are single chunks, when a launch
// has many: a team walks several consecutive rows of a segment with the
// ring running on from row to row (fwd_cf_walk_kernel).
#include "kernels/fwd_common.h"

namespace conv1d::kernels::dev {
namespace {

using detail::kTeam;
using detail::WidthSwitch;

// A walked forward segment (ws_partial_offset == kWsWalked; the planner:
// 16-bit rows of one chunk, whole-vector or shifted): the team of tile t
// walks the channels_per_tile rows from r0 = t * channels_per_tile on
// (fewer in the segment's last tile; rows counted over batch and channel,
// row r at x + r * L), row after row. The issue side of the ring runs on
// from one row's last step into the next row's first, so a row starts with
// its first steps already landed; the next row's weights are loaded while
// a row runs. Within a row the steps are those of fwd_cf_stream_team with
// the chunk being the whole row: lane 31 carries the x̃ left of the next
// step (the initial state, or zeros, before the row's first), a partial
// last step reads zeros past the row and stores nothing there.
// kShift (seg.vec == kVecShifted): each row on the 16-byte grid that
// starts o elements before it (o from the row's own address, so it changes
// from row to row); the grid's elements before the row read as x̃ and the
// vectors that straddle either end of the row are stored element by
// element.
template <class T, int W, bool kSilu, bool kShift>
__device__ __forceinline__ void fwd_cf_walk_team(const KParams& p, const Conv1dSegment& seg, int64_t tile,
                                                 int lane, uint4 (*stage)[kTeam]) {
  using S = typename T::S;
  constexpr int N = kVecElts<T>;
  constexpr int kH = W - 1;
  constexpr int kStep = kTeam * N;
  constexpr int kP = detail::FwdWalkTraits<W>::kPrefetch;
  constexpr int kSlots = kP + 1;
  static_assert(N > kH, "a lane's tail must hold the whole halo");
  const int64_t L = seg.seqlen;
  const int64_t r0 = tile * seg.channels_per_tile;
  const int64_t left = seg.batch * p.dim - r0;
  const int nr = left < seg.channels_per_tile ? static_cast<int>(left) : seg.channels_per_tile;
  const bool last = lane == kTeam - 1;
  const int src_prev = (lane + kTeam - 1) & (kTeam - 1);
  const int lpos = lane * N;  // this lane's grid position in a row's step 0
  const S* x = static_cast<const S*>(seg.in(Role::kX));
  S* y = static_cast<S*>(seg.out(Role::kY));
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

  // The next step to issue: row ir of the tile, step ist of that row (zeros
  // once past the tile's last row or, in a partial last step, past the
  // row). One group per call.
  int ir = 0, ist = 0;
  Span isp = span_of(r0);
  int64_t ioff = r0 * L - isp.o;  // the issued row's grid start
  auto issue = [&](int slot) {
    const bool ok = ir < nr && ist < isp.lsteps;
    copy16_async(&stage[slot][lane], xp + (ok ? ioff + static_cast<int64_t>(ist) * kStep : 0), ok ? 16 : 0);
    copy_async_commit();
    if (++ist == isp.nsteps) {
      ist = 0;
      ++ir;
      if constexpr (kShift) isp = span_of(r0 + ir);
      ioff = (r0 + ir) * L - isp.o;
    }
  };
#pragma unroll
  for (int q = 0; q < kP; ++q) issue(q);
  int rd = 0, wr = kP;
  // This row's weights and bias (w, bias) and the next row's (wn, bn).
  float w[W], bias = 0.0f, wn[W] = {}, bn = 0.0f;
  auto load_weights = [&](int64_t d, float (&wv)[W], float& bv) {
#pragma unroll
    for (int k = 0; k < W; ++k) wv[k] = load_any(seg.in(Role::kWeight), d * W + k, p.wtype);
    if (p.has_bias) bv = load_any(seg.in(Role::kBias), d, p.wtype);
  };
  int64_t d = mod_fast(r0, p.dim);
  load_weights(d, w, bias);
  Span sp = span_of(r0);
  float carry[kH];  // lane 31: x̃ left of the next step
#pragma unroll 1
  for (int r = 0; r < nr; ++r) {
    const int64_t row = r0 + r;
    d = d + 1 == p.dim ? 0 : d + 1;
    if (r + 1 < nr) load_weights(d, wn, bn);  // used from the next row on
    const S* xrow = x + row * L;
    if constexpr (kShift) {
      if (r > 0) sp = span_of(row);
    }
    S* yp = y + row * L - sp.o + lpos;
#pragma unroll
    for (int i = 0; i < kH; ++i) carry[i] = 0.0f;
    if (last && p.has_init) load_left<T, N, W>(p, seg, xrow, row, -sp.o, carry);
#pragma unroll 1
    for (int st = 0; st < sp.nsteps; ++st) {
      copy_async_wait<kP - 1>();  // step st's group has landed
      const uint4 xb = stage[rd][lane];
      issue(wr);
      rd = rd + 1 == kSlots ? 0 : rd + 1;
      wr = wr + 1 == kSlots ? 0 : wr + 1;
      float xf[kH + N];  // x̃ at pos-(W-1) .. pos+N-1
      {
        float xv[N];
        unpack_words<T>(xb, xv);
#pragma unroll
        for (int e = 0; e < N; ++e) xf[kH + e] = xv[e];
        if constexpr (kShift) {
          if (lpos == 0 && st == 0) {  // the grid's first vector: before the row, x̃
#pragma unroll
            for (int e = 0; e < N; ++e) {
              if (e < sp.o) xf[kH + e] = x_tilde_cf<T>(p, seg, xrow, row, e - sp.o, W);
            }
          }
        }
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
        const float z = preact(w, bias, xf, e);
        out[e] = kSilu ? silu_f(z) : z;
      }
      if (st < sp.lsteps) {
        const int64_t g = lpos + static_cast<int64_t>(st) * kStep;
        if (!kShift || (g >= N && g + N <= L + sp.o)) {
          store_words(yp + static_cast<int64_t>(st) * kStep, pack_words<T>(out));
        } else {
          store_in_row<T, N>(yp + static_cast<int64_t>(st) * kStep, g - sp.o, L, out);
        }
      }
    }
    if (p.ret_final && lane == 0) write_final_cf<T, W>(p, seg, xrow, row);
#pragma unroll
    for (int k = 0; k < W; ++k) w[k] = wn[k];
    bias = bn;
  }
  copy_async_wait<0>();  // the ring is free for the team's next tile
}

// The walk range: fwd_cf_walk_team, channels_per_tile rows per tile (its
// own kernel, so that fwd_cf_stream_kernel keeps its register allocation).
template <class T, int W>
__global__ void __launch_bounds__(kTeam * detail::FwdWalkTraits<W>::kTeams, detail::FwdWalkTraits<W>::kMinBlocks)
    fwd_cf_walk_kernel(KParams p) {
  gpu_allow_dependents();  // the next launch may take the SMs this one frees
  constexpr int kTeams = detail::FwdWalkTraits<W>::kTeams;
  __shared__ uint4 stage[kTeams][detail::FwdWalkTraits<W>::kPrefetch + 1][kTeam];
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
      if (shift) fwd_cf_walk_team<T, W, kSilu, true>(p, seg, tile - seg.tile_begin, lane, stage[team]);
      else fwd_cf_walk_team<T, W, kSilu, false>(p, seg, tile - seg.tile_begin, lane, stage[team]);
    });
  }
  gpu_exit_after_prerequisites();  // see LaunchKernel
}

}  // namespace

template <class T>
hipError_t LaunchFwdCfWalk(const KParams& k, hipStream_t s) {
  constexpr int kTeams = detail::kFwdWalkTeams;
  const unsigned grid = GridFor((k.total_tiles - k.tile_begin + kTeams - 1) / kTeams);
  hipError_t e = hipSuccess;
  const bool launched = WidthSwitch(k.width, [&](auto w) {
    e = LaunchKernel(k.after_previous, fwd_cf_walk_kernel<T, decltype(w)::value>, grid, kTeam * kTeams, s, k);
  });
  return launched ? e : hipErrorInvalidValue;
}

template hipError_t LaunchFwdCfWalk<F16>(const KParams&, hipStream_t);
template hipError_t LaunchFwdCfWalk<BF16>(const KParams&, hipStream_t);

}  // namespace conv1d::kernels::dev
