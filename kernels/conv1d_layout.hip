// The tile layout of one segment on each path (conv1d_layout.h). Host
// code only; pure functions.
#include "kernels/conv1d_layout.h"

namespace conv1d::kernels::detail {

int32_t ChoosePath(const Conv1dProblem& p) {
  if (p.op == KernelOp::kUpdate) return kPathUpdate;
  if (!FastWidth(p.width)) return kPathGeneral;
  return p.layout == KernelLayout::kChannelFirst ? kPathFastChannelFirst : kPathFastChannelLast;
}

int32_t ShortLanes(int64_t nvec) {
  int32_t lpr = kTeam;
  while (lpr > kMinLanesPerRow && nvec <= lpr / 2) lpr /= 2;
  return lpr;
}

bool CfVecShape(const Conv1dProblem& p, int64_t L) {
  const int64_t ne = 16 / ElemBytes(p.x_type);
  const bool long_row = L / ne > kTeam;
  return L % ne == 0 && (HaloInVector(p.width, static_cast<int>(ne)) || long_row);
}

bool CfShiftedShape(const Conv1dProblem& p, int64_t L) {
  return (p.op == KernelOp::kForward || p.op == KernelOp::kBackward) && L > kTeam &&
         !CfVecShape(p, L);
}

CfLayout CfSegmentLayout(const Conv1dProblem& p, int64_t B, int64_t L, bool vec,
                         int64_t short_steps, bool shifted, int64_t walk_group) {
  const bool bwd = p.op == KernelOp::kBackward;
  const int64_t esize = ElemBytes(p.x_type);
  const int64_t D = p.dim, W = p.width;
  const int64_t ne = 16 / esize;
  CfLayout c;
  const int64_t n_el = vec ? ne : 1;
  const int64_t max_v = bwd ? MaxPerLaneBwd(p.width) : kMaxPerLaneFwd;
  const int64_t nvec = CeilDiv(L, n_el);
  const int64_t v = CeilDiv(nvec, kTeam) < max_v ? CeilDiv(nvec, kTeam) : max_v;
  c.per_lane = static_cast<int32_t>(v);
  c.nchunks = CeilDiv(L, kTeam * v * n_el);
  if (v == 1 && c.nchunks == 1 && !shifted) {
    // Short rows: several rows per team and, when a row needs at most
    // half a team, several rows per slot (lanes_per_row lanes each).
    const int32_t lpr = ShortLanes(nvec);
    c.lanes_per_row = lpr;
    c.rows_per_tile = static_cast<int32_t>(max_v) * (kTeam / lpr);
    if (vec) {
      // fwd/bwd_cf_short_kernel: short_steps steps of kTeam / lpr rows, at
      // most kTeam rows and at least 2 (rows_per_tile > 1 marks the kind).
      int64_t st = short_steps;
      while (st > 1 && st * (kTeam / lpr) > kTeam) st /= 2;
      if (st * (kTeam / lpr) < 2) st = 2;
      c.rows_per_tile = static_cast<int32_t>(st * (kTeam / lpr));
    }
    c.tiles = CeilDiv(B * D, c.rows_per_tile);
    // Short-row vector segments of one batch row per channel: the lane
    // group of a row sums its whole dweight and stores it (no partials).
    c.direct = bwd && vec && B == 1;
  } else {
    if (vec) {
      // fwd_cf_stream_kernel, bwd_cf_stream_kernel: chunks of at most
      // k*StreamSteps steps, the row's steps spread evenly over them. In
      // 16-bit types, rows that are single chunks may be walked instead
      // (shifted rows too), the ring running on from row to row: in the
      // backward the B rows of a channel when short enough together, a
      // team walking channel after channel and storing their dweight
      // (bwd_cf_walk_kernel); in the forward consecutive rows of at most
      // kFwdWalkRowSteps steps, when the launch groups at least two to a
      // tile (fwd_cf_walk_kernel). Walked
      // segments are marked kWsWalked, which no other long-row segment has.
      const int64_t steps = CeilDiv(nvec, kTeam);
      const int64_t cap = bwd ? BwdStreamSteps(static_cast<int>(esize)) : kFwdStreamSteps;
      const int64_t per = CeilDiv(steps, CeilDiv(steps, cap));
      c.per_lane = static_cast<int32_t>(per);
      c.nchunks = CeilDiv(steps, per);
      const bool single = esize == 2 && c.nchunks == 1;
      if (bwd && single && B * steps <= kBwdWalkSteps) {
        c.walk = true;
        c.direct = true;
        int64_t g = walk_group;
        while (g > 1 && g * B * steps > kBwdWalkTileSteps) g /= 2;
        c.channels_per_tile = static_cast<int32_t>(g);
      } else if (!bwd && single && steps <= kFwdWalkRowSteps) {
        int64_t g = walk_group;
        while (g > 1 && g * steps > kFwdWalkTileSteps) g /= 2;
        c.walk = g > 1;
        c.channels_per_tile = static_cast<int32_t>(g);
      } else if (bwd && c.nchunks == 1 && B == 1) {
        // A tile holds the channel's whole dweight: stored by the stream
        // kernel itself (kWsDirect), no partials.
        c.direct = true;
      }
    }
    // A walked tile takes channels (backward) or rows (forward).
    c.tiles = c.walk ? CeilDiv(bwd ? D : B * D, c.channels_per_tile) : B * D * c.nchunks;
  }
  if (bwd && !c.direct) c.floats = D * B * c.nchunks * (W + 1);
  return c;
}

int64_t ClChunks(const Conv1dProblem& p, int64_t L, int64_t steps) {
  const bool bwd = p.op == KernelOp::kBackward;
  if (steps <= 0) steps = bwd ? kClStepsBwd : ClStepsFwd(ElemBytes(p.x_type));
  return CeilDiv(L, kClRows * steps);
}

int64_t ClFwdSteps(const Conv1dProblem& p, const Conv1dSegment* segs, int32_t n, int64_t resident) {
  const int64_t base = ClStepsFwd(ElemBytes(p.x_type));
  // fp32 keeps the default, which its kernel reads as a constant: a block
  // keeps 32 KiB of x in flight (16-bit: 16 KiB), so a lone block per
  // multiprocessor in a last wave nearly fills the memory pipe. On H200,
  // 4x2048x2048, fitted: bf16 73.4 -> 82.2 % of a copy, fp32 87.4 -> 86.4,
  // as low as with the default count read from the table (86.6).
  if (resident <= 0 || ElemBytes(p.x_type) == 4) return base;
  const int64_t kN = ClVecFwd(ElemBytes(p.x_type));
  const int64_t ndb = CeilDiv(p.dim % kN == 0 ? p.dim / kN : p.dim, kClCols);
  auto tiles = [&](int64_t steps) {
    int64_t t = 0;
    for (int32_t i = 0; i < n; ++i) t += segs[i].batch * ndb * ClChunks(p, segs[i].seqlen, steps);
    return t;
  };
  const int64_t tiles_base = tiles(base);
  const int64_t waves = tiles_base / resident;
  if (waves < 1 || tiles_base % resident == 0) return base;
  // tiles() does not grow with the steps: the fewest steps that fit.
  int64_t lo = base + 1, hi = 2 * base;
  if (tiles(hi) > waves * resident) return base;
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (tiles(mid) <= waves * resident) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

int64_t WalkGroup(const Conv1dProblem& p, const Conv1dSegment* segs, int32_t n) {
  const int64_t esize = ElemBytes(p.x_type);
  const bool bwd = p.op == KernelOp::kBackward;
  if ((!bwd && p.op != KernelOp::kForward) || esize != 2 || ChoosePath(p) != kPathFastChannelFirst) return 1;
  const int64_t ne = 16 / esize;
  int64_t walked = 0;  // walkable channels (backward) or rows (forward)
  for (int32_t i = 0; i < n; ++i) {
    const int64_t L = segs[i].seqlen;
    const bool shifted = CfShiftedShape(p, L);
    if (!shifted && !CfVecShape(p, L)) continue;  // scalar rows
    // As the first pass lays the segment out (shifted rows on the grid);
    // a forward segment is walkable when rows would pair up.
    const CfLayout c = CfSegmentLayout(p, segs[i].batch, shifted ? L + ne - 1 : L, true, 1, shifted, bwd ? 1 : 2);
    if (c.walk) walked += bwd ? p.dim : segs[i].batch * p.dim;
  }
  const int64_t target = bwd ? kBwdWalkTiles : kFwdWalkTiles;
  int64_t g = 1;
  while (target > 0 && walked / (g * 2) >= target) g *= 2;
  return g;
}

}  // namespace conv1d::kernels::detail
