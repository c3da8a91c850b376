// Internal to kernels/: the tiling constants shared by the host planner and
// the kernels, and the per-op launcher entry points Conv1dRun dispatches to.
// Not part of the public API (see conv1d_kernels.h). Constants only and
// function declarations; no state.
#ifndef CONV1D_KERNELS_CONV1D_INTERNAL_H_
#define CONV1D_KERNELS_CONV1D_INTERNAL_H_

#include <cstdint>

#include "kernels/conv1d_params.h"

namespace conv1d::kernels::detail {

enum Path : int32_t {
  kPathFastChannelFirst = 1,
  kPathFastChannelLast = 2,
  kPathGeneral = 3,
  kPathUpdate = 4,
};

// Channel-first fast path: a team of 32 lanes (half a wavefront on wave64
// hardware) owns one chunk of one row; each lane holds `per_lane` vectors of
// 16 bytes (or single elements on the scalar path).
// Rows shorter than one vector per lane are packed several to a team
// (rows_per_tile) so that each lane still has several loads in flight,
// lanes_per_row (at least kMinLanesPerRow) lanes per row.
inline constexpr int kTeam = 32;
inline constexpr int kMinLanesPerRow = 4;
inline constexpr int kTeamsPerBlock = 8;
// Forward vectors per lane (16-bit long vector rows use fwd_cf_stream_kernel
// instead, below).
inline constexpr int kMaxPerLaneFwd = 4;
// Backward, vectors per lane by element size: 4 at 128 registers (2
// blocks/SM) or 2 at 80 (3 blocks/SM). CONV1D_BWD_SLOTS (fp32) and
// CONV1D_BWD_SLOTS_16 (fp16/bf16) pick them at build time (tuning only).
// 16-bit long rows on the vector path use bwd_cf_stream_kernel instead
// (below); for 16-bit types these apply to short rows and the scalar path.
#ifndef CONV1D_BWD_SLOTS
#define CONV1D_BWD_SLOTS 4
#endif
#ifndef CONV1D_BWD_SLOTS_16
#define CONV1D_BWD_SLOTS_16 4
#endif
constexpr int MaxPerLaneBwd(int elem_bytes) {
  return elem_bytes == 4 ? CONV1D_BWD_SLOTS : CONV1D_BWD_SLOTS_16;
}
constexpr int BwdMinBlocks(int elem_bytes) { return MaxPerLaneBwd(elem_bytes) > 2 ? 2 : 3; }
// Channel-first backward of 16-bit long rows on the vector path
// (bwd_cf_stream_kernel): a team walks one chunk of a row, per_lane steps of
// kTeam vectors, with the loads of the next kBwdStreamPrefetch steps in
// flight (asynchronous copies into a shared-memory ring of
// kBwdStreamPrefetch + 1 slots of 1 KiB per team, 40 KiB per block at 4).
// The planner gives a chunk at most kBwdStreamSteps steps. Launch bounds:
// 256 threads, CONV1D_BWD_STREAM_MIN_BLOCKS blocks/SM (2: up to 128
// registers). CONV1D_BWD_STREAM_* override these at build time (tuning
// only; the ring stays within 48 KiB of static shared memory, PREFETCH <= 5).
#ifndef CONV1D_BWD_STREAM_STEPS
#define CONV1D_BWD_STREAM_STEPS 16
#endif
#ifndef CONV1D_BWD_STREAM_PREFETCH
#define CONV1D_BWD_STREAM_PREFETCH 4
#endif
#ifndef CONV1D_BWD_STREAM_MIN_BLOCKS
#define CONV1D_BWD_STREAM_MIN_BLOCKS 2
#endif
inline constexpr int kBwdStreamSteps = CONV1D_BWD_STREAM_STEPS;
inline constexpr int kBwdStreamPrefetch = CONV1D_BWD_STREAM_PREFETCH;
static_assert(kBwdStreamPrefetch >= 1 && kBwdStreamPrefetch <= 5, "ring of 2..6 KiB per team");
// Channel-first forward of 16-bit long rows on the vector path
// (fwd_cf_stream_kernel): the same walk as the backward stream, x only, so
// a ring slot is 512 B per team; kFwdStreamPrefetch steps in flight
// (kFwdStreamPrefetch + 1 slots, 28 KiB per block at 6), chunks of at most
// kFwdStreamSteps steps (8: more teams than whole 16-step rows, which
// measured better), CONV1D_FWD_STREAM_MIN_BLOCKS blocks/SM in the launch
// bounds (4: up to 64 registers). CONV1D_FWD_STREAM_* override these at
// build time (tuning only; the ring stays within 48 KiB of static shared
// memory, PREFETCH <= 11).
#ifndef CONV1D_FWD_STREAM_STEPS
#define CONV1D_FWD_STREAM_STEPS 8
#endif
#ifndef CONV1D_FWD_STREAM_PREFETCH
#define CONV1D_FWD_STREAM_PREFETCH 6
#endif
#ifndef CONV1D_FWD_STREAM_MIN_BLOCKS
#define CONV1D_FWD_STREAM_MIN_BLOCKS 4
#endif
// CONV1D_FWD_STREAM_TEAMS: teams per block of fwd_cf_stream_kernel
// (tuning only; give CONV1D_FWD_STREAM_MIN_BLOCKS with it).
#ifndef CONV1D_FWD_STREAM_TEAMS
#define CONV1D_FWD_STREAM_TEAMS 8
#endif
inline constexpr int kFwdStreamTeams = CONV1D_FWD_STREAM_TEAMS;
inline constexpr int kFwdStreamSteps = CONV1D_FWD_STREAM_STEPS;
inline constexpr int kFwdStreamPrefetch = CONV1D_FWD_STREAM_PREFETCH;
static_assert(kFwdStreamPrefetch >= 1 && kFwdStreamPrefetch <= 11, "ring of 1..6 KiB per team");
// Backward of 16-bit long rows whose B rows of a channel hold at most
// kBwdWalkSteps steps in all, each row a single chunk: one team per
// channel walks the B rows and stores dweight/dbias itself
// (no partials, no reduce_dw_kernel). 0 turns the walk off.
// CONV1D_BWD_WALK_STEPS overrides it at build time (tuning only).
#ifndef CONV1D_BWD_WALK_STEPS
#define CONV1D_BWD_WALK_STEPS 32
#endif
inline constexpr int kBwdWalkSteps = CONV1D_BWD_WALK_STEPS;
// Teams per block and blocks/SM in the launch bounds of
// bwd_cf_walk_kernel (tuning only).
#ifndef CONV1D_BWD_WALK_TEAMS
#define CONV1D_BWD_WALK_TEAMS 8
#endif
#ifndef CONV1D_BWD_WALK_MIN_BLOCKS
#define CONV1D_BWD_WALK_MIN_BLOCKS CONV1D_BWD_STREAM_MIN_BLOCKS
#endif
inline constexpr int kBwdWalkTeams = CONV1D_BWD_WALK_TEAMS;
// Short-row backward kernel (bwd_cf_short_kernel, rows_per_tile > 1 on the
// vector path): a team walks rows kTeam / lanes_per_row at a time (a step
// of kTeam vectors), with the loads of the next kBwdShortPrefetch steps in
// flight in a shared-memory ring (kBwdShortPrefetch + 1 slots of 1 KiB per
// team, 40 KiB per block at 4). fp32 (BwdShortPersist false): one tile
// per team (bwd_cf_rows_team); a tile holds at most kBwdShortSteps steps
// and kTeam rows, fewer when the launch's short rows make fewer than
// kBwdShortTiles tiles of that size, so that small launches still spread
// over the device. fp16/bf16 (BwdShortPersist true): the launcher gives
// the kernel no more blocks than the device holds at once (SM count x
// blocks/SM below) and each team takes an even, contiguous share of the
// tiles, walked as one run per segment with the ring running from tile to
// tile (bwd_cf_run_team); tiles are then of one step (at least 2 rows),
// the unit of that share. CONV1D_BWD_SHORT_PERSIST{32,16} pick this per
// element size (default 0 / 1). Blocks per SM in the launch bounds:
#ifndef CONV1D_BWD_SHORT_MIN_BLOCKS
#define CONV1D_BWD_SHORT_MIN_BLOCKS 3
#endif
#ifndef CONV1D_BWD_SHORT_MIN_BLOCKS_16
#define CONV1D_BWD_SHORT_MIN_BLOCKS_16 2
#endif
constexpr int BwdShortMinBlocks(int elem_bytes) {
  return elem_bytes == 4 ? CONV1D_BWD_SHORT_MIN_BLOCKS : CONV1D_BWD_SHORT_MIN_BLOCKS_16;
}
#ifndef CONV1D_BWD_SHORT_PREFETCH
#define CONV1D_BWD_SHORT_PREFETCH 4
#endif
#ifndef CONV1D_BWD_SHORT_STEPS
#define CONV1D_BWD_SHORT_STEPS 16
#endif
#ifndef CONV1D_BWD_SHORT_PERSIST32
#define CONV1D_BWD_SHORT_PERSIST32 0
#endif
#ifndef CONV1D_BWD_SHORT_PERSIST16
#define CONV1D_BWD_SHORT_PERSIST16 1
#endif
constexpr bool BwdShortPersist(int elem_bytes) {
  return (elem_bytes == 4 ? CONV1D_BWD_SHORT_PERSIST32 : CONV1D_BWD_SHORT_PERSIST16) != 0;
}
#ifndef CONV1D_BWD_SHORT_TILES
#define CONV1D_BWD_SHORT_TILES 4096
#endif
inline constexpr int kBwdShortPrefetch = CONV1D_BWD_SHORT_PREFETCH;
inline constexpr int kBwdShortSteps = CONV1D_BWD_SHORT_STEPS;
// Steps per tile cap for the planner: one step where teams walk runs.
constexpr int BwdShortSteps(int elem_bytes) { return BwdShortPersist(elem_bytes) ? 1 : kBwdShortSteps; }
inline constexpr int64_t kBwdShortTiles = CONV1D_BWD_SHORT_TILES;
static_assert(kBwdShortPrefetch >= 1 && kBwdShortPrefetch <= 5, "ring of 2..6 KiB per team");
static_assert(kBwdShortSteps >= 1, "at least one step per tile");
// Short-row forward kernel (fwd_cf_short_kernel): the same walk over the
// rows of a tile, x only (ring slots of 512 B per team, 28 KiB per block at
// 6 steps ahead), tiles of at most kFwdShortSteps steps and kTeam rows,
// fewer when the launch would make fewer than kFwdShortTiles tiles;
// CONV1D_FWD_SHORT_MIN_BLOCKS blocks per SM (4: up to 64 registers).
#ifndef CONV1D_FWD_SHORT_MIN_BLOCKS
#define CONV1D_FWD_SHORT_MIN_BLOCKS 4
#endif
#ifndef CONV1D_FWD_SHORT_PREFETCH
#define CONV1D_FWD_SHORT_PREFETCH 6
#endif
#ifndef CONV1D_FWD_SHORT_STEPS
#define CONV1D_FWD_SHORT_STEPS 8
#endif
#ifndef CONV1D_FWD_SHORT_TILES
#define CONV1D_FWD_SHORT_TILES 4096
#endif
inline constexpr int kFwdShortPrefetch = CONV1D_FWD_SHORT_PREFETCH;
inline constexpr int kFwdShortSteps = CONV1D_FWD_SHORT_STEPS;
inline constexpr int64_t kFwdShortTiles = CONV1D_FWD_SHORT_TILES;
static_assert(kFwdShortPrefetch >= 1 && kFwdShortPrefetch <= 11, "ring of 1..6 KiB per team");
static_assert(kFwdShortSteps >= 1, "at least one step per tile");

// Channel-last fast path: a block of 32 (channel vectors) x 8 (time chunks)
// threads; each thread streams ClStepsFwd / kClStepsBwd time steps of its
// channel vector (ClVec channels; the scalar path, one).
inline constexpr int kClCols = 32;
inline constexpr int kClRows = 8;
// Forward: steps per thread and channels per vector by element size. fp32:
// 8 steps, all of a thread's loads issued at once (116 registers, 2
// blocks/SM). 16-bit vector path: 16 steps walked one at a time with x of
// the next kClFwdPrefetch16 steps in flight in a shared-memory ring
// (fwd_cl_ring; 9 slots of 2 KiB per block at 8; 0 switches back to all
// loads at once, in registers), 3 blocks/SM (80 registers) in the launch
// bounds. CONV1D_CL_FWD_{STEPS16,VEC16,PREFETCH16,MIN_BLOCKS16} override
// the 16-bit settings (tuning only; VEC16 4 or 8: 8- or 16-byte vectors).
#ifndef CONV1D_CL_FWD_STEPS16
#define CONV1D_CL_FWD_STEPS16 16
#endif
#ifndef CONV1D_CL_FWD_VEC16
#define CONV1D_CL_FWD_VEC16 4
#endif
#ifndef CONV1D_CL_FWD_MIN_BLOCKS16
#define CONV1D_CL_FWD_MIN_BLOCKS16 3
#endif
#ifndef CONV1D_CL_FWD_PREFETCH16
#define CONV1D_CL_FWD_PREFETCH16 8
#endif
inline constexpr int kClFwdPrefetch16 = CONV1D_CL_FWD_PREFETCH16;
constexpr int ClStepsFwd(int elem_bytes) { return elem_bytes == 4 ? 8 : CONV1D_CL_FWD_STEPS16; }
constexpr int ClVecFwd(int elem_bytes) { return elem_bytes == 4 ? 4 : CONV1D_CL_FWD_VEC16; }
constexpr int ClFwdMinBlocks(int elem_bytes) { return elem_bytes == 4 ? 2 : CONV1D_CL_FWD_MIN_BLOCKS16; }
static_assert(CONV1D_CL_FWD_VEC16 == 4 || CONV1D_CL_FWD_VEC16 == 8, "8- or 16-byte vectors");
inline constexpr int kClVecBwd = 4;
// Backward: each thread walks kClStepsBwd steps (plus W-1 of right halo).
// On the vector path the x and dout vectors of the next
// ClBwdPrefetch(element size) steps are in flight while a step is computed
// (asynchronous copies into the thread's slots of a shared-memory ring of
// prefetch + 1 slots; 40 KiB per block for fp32 at 4, 36 KiB for 16-bit at
// 8); the scalar path loads groups of kClGroupBwd{32,16} steps into
// registers, the next group's loads in flight while the current one is
// computed. Launch bounds: 256 threads, CONV1D_CL_BWD_MIN_BLOCKS blocks/SM.
// CONV1D_CL_BWD_ROTATE=1 unrolls the ring loop by W-1 steps. CONV1D_CL_BWD_*
// override these at build time (tuning only; the ring stays within 48 KiB
// of static shared memory).
#ifndef CONV1D_CL_BWD_STEPS
#define CONV1D_CL_BWD_STEPS 64
#endif
#ifndef CONV1D_CL_BWD_GROUP32
#define CONV1D_CL_BWD_GROUP32 2
#endif
#ifndef CONV1D_CL_BWD_GROUP16
#define CONV1D_CL_BWD_GROUP16 4
#endif
#ifndef CONV1D_CL_BWD_PREFETCH32
#define CONV1D_CL_BWD_PREFETCH32 4
#endif
#ifndef CONV1D_CL_BWD_PREFETCH16
#define CONV1D_CL_BWD_PREFETCH16 8
#endif
#ifndef CONV1D_CL_BWD_ROTATE
#define CONV1D_CL_BWD_ROTATE 0
#endif
#ifndef CONV1D_CL_BWD_MIN_BLOCKS
#define CONV1D_CL_BWD_MIN_BLOCKS 2
#endif
inline constexpr int kClStepsBwd = CONV1D_CL_BWD_STEPS;
inline constexpr int kClGroupBwd32 = CONV1D_CL_BWD_GROUP32;
inline constexpr int kClGroupBwd16 = CONV1D_CL_BWD_GROUP16;
constexpr int ClBwdPrefetch(int elem_bytes) {
  return elem_bytes == 4 ? CONV1D_CL_BWD_PREFETCH32 : CONV1D_CL_BWD_PREFETCH16;
}
// Bytes of one block's ring (slots x {x, dout} x threads x vector).
constexpr int ClBwdRingBytes(int elem_bytes) {
  return (ClBwdPrefetch(elem_bytes) + 1) * 2 * kClCols * kClRows * kClVecBwd * elem_bytes;
}
static_assert(CONV1D_CL_BWD_PREFETCH32 >= 1 && ClBwdRingBytes(4) <= 48 * 1024, "fp32 ring");
static_assert(CONV1D_CL_BWD_PREFETCH16 >= 1 && ClBwdRingBytes(2) <= 48 * 1024, "16-bit ring");

// General path: one thread per element.
inline constexpr int kGenBlock = 256;
// Update: one thread per row (kGenBlock per block), or on the vector path
// one per 16 bytes of x worth of rows, kUpdBlock per block
// (CONV1D_UPD_BLOCK, tuning only).
#ifndef CONV1D_UPD_BLOCK
#define CONV1D_UPD_BLOCK 128
#endif
inline constexpr int kUpdBlock = CONV1D_UPD_BLOCK;

inline constexpr int64_t kMaxGridBlocks = int64_t{1} << 22;

inline int ElemBytes(ScalarType t) { return t == ScalarType::kF32 ? 4 : 2; }
inline constexpr int kMaxFastWidth = 4;  // fast paths: W = 2..kMaxFastWidth
inline bool FastWidth(int32_t w) { return w >= 2 && w <= kMaxFastWidth; }

// Launchers (one per kernel family); return the launch's error code.
using Stream = void*;  // hipStream_t / cudaStream_t, both pointer types
int32_t LaunchFwdChannelFirst(const Conv1dProblem& p, const Conv1dPlanInfo& plan,
                              const Conv1dSegment* segs, void* ws, Stream s);
int32_t LaunchFwdChannelLast(const Conv1dProblem& p, const Conv1dPlanInfo& plan,
                             const Conv1dSegment* segs, void* ws, Stream s);
int32_t LaunchBwdChannelFirst(const Conv1dProblem& p, const Conv1dPlanInfo& plan,
                              const Conv1dSegment* segs, void* ws, Stream s);
int32_t LaunchBwdChannelLast(const Conv1dProblem& p, const Conv1dPlanInfo& plan,
                             const Conv1dSegment* segs, void* ws, Stream s);
int32_t LaunchGeneral(const Conv1dProblem& p, const Conv1dPlanInfo& plan,
                      const Conv1dSegment* segs, void* ws, Stream s);
int32_t LaunchUpdate(const Conv1dProblem& p, const Conv1dPlanInfo& plan,
                     const Conv1dSegment* segs, void* ws, Stream s);

}  // namespace conv1d::kernels::detail

#endif  // CONV1D_KERNELS_CONV1D_INTERNAL_H_
