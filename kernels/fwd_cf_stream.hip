// Forward, channel-first long rows on the vector path, every type
// (fwd_cf_stream_kernel): a team walks one chunk of a row with x of the next
// steps in flight in a shared-memory ring; rows of any length on the shifted
// vector grid (kVecShifted).
#include "kernels/fwd_common.h"

namespace conv1d::kernels::dev {
namespace {

using detail::kClCols;
using detail::kClRows;
using detail::kTeam;
using detail::kTeamsPerBlock;
using detail::WidthSwitch;

// Long rows on the vector path (is_stream_tile): a team owns one chunk of
// a row, per_lane steps of kTeam 16-byte vectors of N elements (8 in 16-bit
// types, 4 in fp32; lane l holds elements l*N .. l*N+N-1 of a step), and
// walks the steps in order, as bwd_cf_stream_team does: x of the next kP
// steps is in flight while a step computes, copied asynchronously by each
// lane into its own slot of the team's ring `stage` (kP + 1 slots; the slot
// being filled was read a step earlier), so the in-flight data hold no
// registers. The left x̃ halo of a lane is the previous lane's tail by
// shuffle; lane 0 gets lane 31's tail of the previous step (lane 31 carries
// it; before step 0 it holds the chunk's left halo, loaded directly). A halo
// longer than a vector (fp32 at W = 6..8) comes from the previous two lanes,
// lanes 0 and 1 getting it from lanes 30 and 31 of the previous step (every
// lane keeps its vector of the previous step in `carry`; before step 0, lanes
// 30 and 31 hold the x̃ before the chunk). Only the row's last step can be
// partial (L % N == 0): its lanes at or past L read zeros and store nothing.
// kShift (kVecShifted): rows of any length, their steps on the 16-byte grid
// that starts o elements before the row (o < N); elements before the row read
// as x̃, and vectors that straddle either end of the row are stored element
// by element.
template <class T, int W, bool kSilu, bool kShift>
__device__ __forceinline__ void fwd_cf_stream_team(const KParams& p, const Conv1dSegment& seg,
                                                   int64_t local, int lane, uint4 (*stage)[kTeam]) {
  using S = typename T::S;
  constexpr int N = kVecElts<T>;
  constexpr int kH = W - 1;
  constexpr int kStep = kTeam * N;
  constexpr int kP = detail::kFwdStreamPrefetch;
  constexpr int kSlots = kP + 1;
  constexpr bool kTwo = kH > N;  // the halo from two lanes
  static_assert(kH <= 2 * N, "a halo of at most two lanes' vectors");
  const int64_t L = seg.seqlen;
  const int64_t nchunks = seg.nchunks;
  const int V = seg.per_lane;
  const int64_t row = div_fast(local, nchunks);
  const int64_t chunk = local - row * nchunks;
  const S* xrow = static_cast<const S*>(seg.in(Role::kX)) + row * L;
  S* yrow = static_cast<S*>(seg.out(Role::kY)) + row * L;
  const int o = kShift ? row_shift<S>(xrow) : 0;
  const int64_t Lx = L + o;  // the row's end on the grid
  const int64_t c0 = chunk * V * kStep;
  const int64_t rem = Lx - c0;
  const int nsteps = rem >= static_cast<int64_t>(V) * kStep ? V
                     : rem <= 0                             ? 0
                                                            : static_cast<int>((rem + kStep - 1) / kStep);
  const bool partial = c0 + static_cast<int64_t>(nsteps) * kStep > Lx;  // the row's last step, partial
  const bool last = lane == kTeam - 1;
  const int src_prev = (lane + kTeam - 1) & (kTeam - 1);
  const int64_t lpos = c0 + lane * N;  // this lane's grid position in step 0
  // Steps in which this lane lies inside the row.
  const int lsteps = !partial ? nsteps : lpos >= Lx ? 0 : static_cast<int>((Lx - lpos + kStep - 1) / kStep);
  const S* xp = xrow - o + lpos;
  S* yp = yrow - o + lpos;

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
      for (int e = 0; e < N; ++e) {
        carry[e] = x_tilde_cf<T>(p, seg, xrow, row, lpos - kStep + e - o, W);
      }
    }
  } else {
    if (last) load_left<T, N, W>(p, seg, xrow, row, c0 - o, carry);
  }
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
      if constexpr (kShift) {
        if (lpos == 0 && st == 0) {  // the grid's first vector: before the row, x̃
#pragma unroll
          for (int e = 0; e < N; ++e) {
            if (e < o) xf[kH + e] = x_tilde_cf<T>(p, seg, xrow, row, e - o, W);
          }
        }
      }
    }
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
    float out[N];
#pragma unroll
    for (int e = 0; e < N; ++e) {
      const float z = preact(w, bias, xf, e);
      out[e] = kSilu ? silu_f(z) : z;
    }
    if (st < lsteps) {
      const int64_t g = lpos + static_cast<int64_t>(st) * kStep;
      if (!kShift || (g >= N && g + N <= Lx)) {
        store_words(yp + static_cast<int64_t>(st) * kStep, pack_words<T>(out));
      } else {
        store_in_row<T, N>(yp + static_cast<int64_t>(st) * kStep, g - o, L, out);
      }
    }
  }
  copy_async_wait<0>();  // the ring is free for the team's next tile
  if (p.ret_final && lane == 0 && chunk == nchunks - 1) write_final_cf<T, W>(p, seg, xrow, row);
}

// is_stream_tile for the stream kernel's tile check, which a team runs
// before anything else: see seg_lines_together. Walked rows (kWsWalked)
// are stream tiles too, but the planner's order keeps them out of this
// kernel's range.
template <class T>
__device__ __forceinline__ bool stream_tile_head(const Conv1dSegment& seg) {
  return is_stream_tile(seg) & seg_lines_together(seg);
}


template <class T, int W>
__global__ void __launch_bounds__(kTeam * detail::kFwdStreamTeams,
                                  (detail::FwdStreamTraits<sizeof(typename T::S), W>::kMinBlocks))
    fwd_cf_stream_kernel(KParams p) {
  gpu_allow_dependents();  // the next launch may take the SMs this one frees
  constexpr int kTeams = detail::kFwdStreamTeams;
  // Each team's ring of in-flight steps (fwd_cf_stream_team).
  __shared__ uint4 stage[kTeams][detail::kFwdStreamPrefetch + 1][kTeam];
  const int lane = threadIdx.x % kTeam;
  const int team = threadIdx.x / kTeam;
  const int64_t ntiles = p.total_tiles - p.tile_begin;
  for (int64_t blk = blockIdx.x; blk * kTeams < ntiles; blk += gridDim.x) {
    const int64_t tile = p.tile_begin + blk * kTeams + team;
    if (tile >= p.total_tiles) continue;
    const Conv1dSegment& seg = p.segs[find_tile_segment(p, tile, lane)];
    if (!stream_tile_head<T>(seg)) continue;
    BoolSwitch(p.silu, [&](auto silu) {
      if (seg.vec == kVecShifted) {
        fwd_cf_stream_team<T, W, decltype(silu)::value, true>(p, seg, tile - seg.tile_begin, lane, stage[team]);
      } else {
        fwd_cf_stream_team<T, W, decltype(silu)::value, false>(p, seg, tile - seg.tile_begin, lane, stage[team]);
      }
    });
  }
  gpu_exit_after_prerequisites();  // see LaunchKernel
}


}  // namespace

template <class T>
hipError_t LaunchFwdCfStream(const KParams& k, hipStream_t s) {
  constexpr int kTeams = detail::kFwdStreamTeams;
  const unsigned grid = GridFor((k.total_tiles - k.tile_begin + kTeams - 1) / kTeams);
  hipError_t e = hipSuccess;
  const bool launched = WidthSwitch(k.width, [&](auto w) {
    e = LaunchKernel(k.after_previous, fwd_cf_stream_kernel<T, decltype(w)::value>, grid, kTeam * kTeams, s, k);
  });
  return launched ? e : hipErrorInvalidValue;
}

template hipError_t LaunchFwdCfStream<F32>(const KParams&, hipStream_t);
template hipError_t LaunchFwdCfStream<F16>(const KParams&, hipStream_t);
template hipError_t LaunchFwdCfStream<BF16>(const KParams&, hipStream_t);

}  // namespace conv1d::kernels::dev
