// Host side: the tile layout of one segment on each path, which the planner
// (Conv1dPlan) and the workspace query (Conv1dWorkspaceBytes) share
// (kernels/conv1d_host.hip). Pure functions of the problem and the
// segment's sizes (WalkGroup: of the whole launch); no state, callable
// from any thread.
#ifndef CONV1D_KERNELS_CONV1D_LAYOUT_H_
#define CONV1D_KERNELS_CONV1D_LAYOUT_H_

#include <cstdint>

#include "kernels/conv1d_internal.h"
#include "kernels/conv1d_kernels.h"

namespace conv1d::kernels::detail {

inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The path a problem takes (kPath*).
int32_t ChoosePath(const Conv1dProblem& p);

// Short rows: lanes per row (a power of two >= 4) for a row of nvec
// vectors (or elements), nvec <= kTeam.
int32_t ShortLanes(int64_t nvec);

// Whether the channel-first vector path may take a row of length L,
// alignment aside: whole 16-byte vectors; short rows (whose kernels pass
// the halo from lane to lane) need the halo within one vector, long rows
// (the stream kernels, which take it from two lanes) take any fast width.
bool CfVecShape(const Conv1dProblem& p, int64_t L);

// Whether a row that the vector path cannot take as it is (L not a whole
// number of vectors, or a short forward row whose halo exceeds a vector)
// runs on the shifted vector grid (kVecShifted), as a long row (a team per
// chunk, even when the row is a single chunk): rows past kTeam elements;
// shorter ones keep the staged scalar path, whose tensors may stay in host
// memory (Conv1dStreamsInPlace).
bool CfShiftedShape(const Conv1dProblem& p, int64_t L);

// The channel-first fast path's layout of a segment of B rows of length L
// on the vector (vec) or scalar path: its scheduling fields, its tiles and
// (backward, unless direct) its dweight partials in floats. Shifted rows
// (L counted on the grid) are long rows. walk_group: how many channels
// (backward) or rows (forward) a walked tile may take (WalkGroup), fewer
// where their steps would pass the walk's tile cap.
struct CfLayout {
  int32_t per_lane = 1;
  int32_t lanes_per_row = kTeam;
  int32_t rows_per_tile = 1;
  int64_t nchunks = 1;
  int64_t tiles = 0;
  int64_t floats = 0;
  int32_t channels_per_tile = 1;  // walk: channels (backward) or rows (forward) a tile walks
  bool walk = false;    // 16-bit long rows walked: bwd_cf_walk_kernel / fwd_cf_walk_kernel
  bool direct = false;  // backward: the main kernel stores dweight itself
};
CfLayout CfSegmentLayout(const Conv1dProblem& p, int64_t B, int64_t L, bool vec,
                         int64_t short_steps, bool shifted = false, int64_t walk_group = 1);

// Channel-last fast path: time chunks per row when a thread walks `steps`
// steps (0: the family's default, ClStepsFwd or kClStepsBwd).
int64_t ClChunks(const Conv1dProblem& p, int64_t L, int64_t steps = 0);

// Channel-last forward: the steps a thread walks in this launch. The
// default (ClStepsFwd), or in 16-bit types more where that evens out the
// last wave: when the launch's tiles take more than one wave of `resident`
// blocks (FwdClResidentBlocks; 0: unknown, the default), the fewest steps
// up to twice the default whose tiles fill the whole waves below
// (4x2048x2048 bf16 on 132 multiprocessors of 3 blocks: 512 tiles, 1.3
// waves, become 384 in one). It changes no result (each output is computed
// by one thread either way), so it may depend on the whole launch and the
// device.
int64_t ClFwdSteps(const Conv1dProblem& p, const Conv1dSegment* segs, int32_t n, int64_t resident);

// The channels (backward) or rows (forward) a walked tile may take in this
// launch: the largest power of two that leaves at least the walk's kTiles
// tiles over every segment the walk would take (alignment aside). It
// changes no result (a channel's dweight is summed by one team either way;
// forward rows are independent), so it may depend on the whole launch.
int64_t WalkGroup(const Conv1dProblem& p, const Conv1dSegment* segs, int32_t n);

}  // namespace conv1d::kernels::detail

#endif  // CONV1D_KERNELS_CONV1D_LAYOUT_H_
