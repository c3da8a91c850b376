// Forward, channel-first short rows on the vector path (fwd_cf_short_kernel):
// a team walks the rows of a tile a step at a time, the next steps' loads
// in flight in a ring, states through a per-team staging.
#include "kernels/fwd_common.h"

namespace conv1d::kernels::dev {
namespace {

using detail::kClCols;
using detail::kClRows;
using detail::kTeam;
using detail::WidthSwitch;

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
  // A short row has at most lanes_per_row vectors (L <= kTeam * N): lane
  // positions and a step's span are 32-bit values.
  const int L32 = static_cast<int>(L);
  const int64_t nrows = seg.batch * p.dim;
  const int lpr = seg.lanes_per_row;  // a power of two (the planner's ShortLanes)
  const int lsh = __ffs(lpr) - 1;     // log2(lpr): shifts, not divisions
  const int rps = kTeam >> lsh;       // rows per step
  const int64_t row_begin = local * seg.rows_per_tile;
  const int64_t left = nrows - row_begin;
  const int nrt = left < seg.rows_per_tile ? static_cast<int>(left) : seg.rows_per_tile;
  constexpr int kTeamShift = 5;
  static_assert(kTeam == 1 << kTeamShift, "log2 of the team");
  const int nsteps = (nrt + rps - 1) >> (kTeamShift - lsh);
  const int sub = lane >> lsh;  // row of the step
  const int pos = (lane & (lpr - 1)) * N;
  const bool first = pos == 0;
  const bool inrow = pos < L32;
  const int src_prev = (lane + kTeam - 1) & (kTeam - 1);
  const int64_t lane_off = (row_begin + sub) * L + pos;
  const int step_off = rps * L32;  // at most kTeam * N elements
  const S* xp = static_cast<const S*>(seg.in(Role::kX)) + lane_off;
  S* yp = static_cast<S*>(seg.out(Role::kY)) + lane_off;  // step st's output, advanced per step

  // Step ni's vector into slot `slot` (nothing past the tile's steps, an
  // empty group); one group per call. xi and ri follow ni, so that a call
  // costs no multiplications.
  const S* xi = xp;
  int ni = 0, ri = sub;  // ri: this lane's row of step ni
  auto issue = [&](int slot) {
    if (ni < nsteps) {
      const bool ok = inrow && ri < nrt;
      copy16_async(&stage[slot][lane], ok ? xi : xp, ok ? 16 : 0);
    }
    copy_async_commit();
    xi += step_off;
    ri += rps;
    ++ni;
  };
#pragma unroll
  for (int q = 0; q < kP; ++q) issue(q);
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
    issue(wr);
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
      if (p.ret_final && pos + N == L32 && rs < nrt) {  // the row's last vector
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
      out[e] = act_fwd(preact(w, bias, xf, e), p.silu);
    }
    if (inrow && rs < nrt) store_f<T, N>(yp, out);
    yp += step_off;
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
template <class T, int W>
__global__ void __launch_bounds__(kTeam * detail::kFwdShortTeams, detail::FwdShortTraits<W>::kMinBlocks)
    fwd_cf_short_kernel(KParams p) {
  gpu_allow_dependents();  // the next launch may take the SMs this one frees
  constexpr int kTeams = detail::kFwdShortTeams;
  // Each team's ring of in-flight steps and its states' staging
  // (fwd_cf_rows_team; 4 bytes per element covers every type).
  __shared__ uint4 stage[kTeams][detail::kFwdShortPrefetch + 1][kTeam];
  __shared__ uint32_t sstate[kTeams][kTeam * (W - 1)];
  const int lane = threadIdx.x % kTeam;
  const int team = threadIdx.x / kTeam;
  const int64_t ntiles = p.total_tiles - p.tile_begin;
  for (int64_t blk = blockIdx.x; blk * kTeams < ntiles; blk += gridDim.x) {
    const int64_t tile = p.tile_begin + blk * kTeams + team;
    if (tile >= p.total_tiles) continue;
    // 16-bit types search the table even in a batch of one shape: there
    // the division took 64 x 1x2048x128 bf16 from 75.4 to 73.9 % of a
    // copy, where fp32 gained a point (H200, 2026-11-29).
    const int si = sizeof(typename T::S) == 4 ? find_tile_segment(p, tile, lane)
                                              : find_segment_team(p.segs, p.nseg, tile, lane);
    const Conv1dSegment& seg = p.segs[si];
    if (!is_short_tile(seg)) continue;
    // The planner gives this kernel no tile when the halo exceeds a vector.
    if constexpr (detail::HaloInVector(W, kVecElts<T>)) {
      fwd_cf_rows_team<T, W>(p, seg, tile - seg.tile_begin, lane, stage[team],
                             reinterpret_cast<typename T::S*>(sstate[team]));
    }
  }
  gpu_exit_after_prerequisites();  // see LaunchKernel
}


}  // namespace

template <class T>
hipError_t LaunchFwdCfShort(const KParams& k, hipStream_t s) {
  constexpr int kTeams = detail::kFwdShortTeams;
  const unsigned grid = GridFor((k.total_tiles - k.tile_begin + kTeams - 1) / kTeams);
  hipError_t e = hipSuccess;
  const bool launched = WidthSwitch(k.width, [&](auto w) {
    e = LaunchKernel(k.after_previous, fwd_cf_short_kernel<T, decltype(w)::value>, grid, kTeam * kTeams, s, k);
  });
  return launched ? e : hipErrorInvalidValue;
}

template hipError_t LaunchFwdCfShort<F32>(const KParams&, hipStream_t);
template hipError_t LaunchFwdCfShort<F16>(const KParams&, hipStream_t);
template hipError_t LaunchFwdCfShort<BF16>(const KParams&, hipStream_t);

}  // namespace conv1d::kernels::dev
