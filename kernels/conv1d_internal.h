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
// 16 bytes (or single elements on the scalar path). Long rows whose
// length is not a whole number of vectors (forward; fp32 backward) work on
// the 16-byte grid that starts before the row (kVecShifted).
// Rows shorter than one vector per lane are packed several to a team
// (rows_per_tile) so that each lane still has several loads in flight,
// lanes_per_row (at least kMinLanesPerRow) lanes per row.
inline constexpr int kTeam = 32;
inline constexpr int kMinLanesPerRow = 4;
inline constexpr int kTeamsPerBlock = 8;

// Tuning, one traits struct per kernel family, chosen by element size
// (4: fp32; 2: fp16/bf16) and, where the registers a thread needs grow
// with it, by the width W. Values only; each was measured (see
// bench/kernels/LOG.md). Launch bounds are 256 threads per block unless
// a struct says otherwise; kMinBlocks is the blocks/SM they ask for (2:
// up to 128 registers, 3: 80, 4: 64).

// Forward, channel-first scalar rows (fwd_cf_kernel): elements per lane
// (long rows) or row slots (short rows). Vector rows use FwdStreamTraits
// or FwdShortTraits instead. Past W = 4 the halos and weights need more
// than 80 registers.
template <int W>
struct FwdCfTraits {
  static constexpr int kMaxPerLane = 4;
  static constexpr int kMinBlocks = W <= 4 ? 3 : 2;
};

// Forward of long rows on the vector path (fwd_cf_stream_kernel): a team
// walks one chunk of a row, per_lane steps of kTeam vectors, with the loads
// of the next kPrefetch steps in flight (asynchronous copies into a
// shared-memory ring of kPrefetch + 1 slots of 512 B per team, 14 KiB per
// block at 6); chunks of at most kSteps steps (16: each chunk pays a
// segment lookup, a ring fill and its weights, which on H200 cost more than
// the extra teams of 8-step chunks gained); kTeams teams per block (4,
// 128 threads: a block that finishes frees its share of the SM sooner than
// one of 8 teams; on H200 +2 points on 4x2048x2048 bf16 and on the
// mixed-length launch, -0.5 on 8x4096x4096 fp32); 8 blocks per SM (64
// registers) up to W = 3 and for fp32 at W = 4, 6 (80) up to W = 6, 4 past
// it. At 64 registers the 16-bit W = 4 spills 48-64 bytes (4x2048x2048 and
// 8x4096x4096 bf16 forward 2.7 and 5.5 points lower, H200, 2026-12-02); fp32
// at W = 4 fits (4x2048x2048 fp32 forward 90.4 -> 91.9 % of a copy).
template <int kElemBytes, int W>
struct FwdStreamTraits {
  static constexpr int kSteps = 16;
  static constexpr int kPrefetch = 6;
  static constexpr int kMinBlocks = W <= 3 || (W == 4 && kElemBytes == 4) ? 8 : W <= 6 ? 6 : 4;
  static constexpr int kTeams = 4;
  static_assert(kPrefetch >= 1 && kPrefetch <= 11, "ring of 1..6 KiB per team");
};

// Forward of 16-bit rows of at most kRowSteps steps on the vector grid
// (single chunks), when a launch has many (fwd_cf_walk_kernel): a team
// walks channels_per_tile consecutive
// rows of a segment (a power of two of at least 2, their steps together at
// most kTileSteps), the ring running on from row to row and the next row's
// weights loaded while a row runs, while the launch keeps at least kTiles
// walked tiles (as BwdWalkTraits; kTiles = 0 turns the walk off). The
// ring and teams are the stream forward's.
template <int W>
struct FwdWalkTraits {
  static constexpr int kRowSteps = 4;
  static constexpr int kTileSteps = 32;
  static constexpr int64_t kTiles = 4096;
  static constexpr int kTeams = FwdStreamTraits<2, W>::kTeams;
  static constexpr int kPrefetch = FwdStreamTraits<2, W>::kPrefetch;
  static constexpr int kMinBlocks = W <= 3 ? 6 : 4;
};

// Forward short rows (fwd_cf_short_kernel): the same walk over the rows of
// a tile, x only (ring slots of 512 B per team, 8 steps ahead: 6 gave a
// point less on 64 x 1x2048x128 bf16 on H200), tiles of at most kSteps
// steps and kTeam rows, fewer when the launch would make fewer than kTiles
// tiles (16 steps: a tile's start, a quarter of its instructions at 8 on
// 64 x 1x2048x128, is paid half as often; 32 lost 6 points in fp32). Up
// to W = 4 the kernel fits 64 registers (4 blocks of 8 teams per SM: 64 x
// 1x2048x128 bf16 76.0 -> 79.1 % of a copy, fp32 84.9 -> 86.5, H200,
// 2026-12-02; its 4096 tiles then run in one wave); past W = 4 the halo
// and the row weights need more than 64, past W = 6 more than 80.
template <int W>
struct FwdShortTraits {
  // Teams per block; kMinBlocks counts blocks of kTeams teams (the same
  // threads per SM as 4 / 3 / 2 blocks of 8 teams). 4 and 2 teams: -1.3
  // points on 64 x 1x2048x128 bf16, the same elsewhere (H200, 2026-11-29).
  static constexpr int kTeams = 8;
  static constexpr int kMinBlocks = (W <= 4 ? 4 : W <= 6 ? 3 : 2) * 8 / kTeams;
  static constexpr int kPrefetch = 8;
  static constexpr int kSteps = 16;
  static constexpr int64_t kTiles = 4096;
  // A block's rings (kPrefetch + 1 slots of 512 B per team) and state
  // staging (4 bytes per state element) in 48 KiB of static shared memory:
  // 9 is the deepest ring at W = 8.
  static_assert(kPrefetch >= 1 &&
                    kTeams * ((kPrefetch + 1) * kTeam * 16 + kTeam * (W - 1) * 4) <= 48 * 1024,
                "the short-row forward's rings and state staging fit static shared memory");
};

// Backward, channel-first scalar path (bwd_cf_kernel): slots (elements)
// per lane, 4 up to W = 4; wider filters hold more halo and weights per
// slot, so 2 slots. A slot holds one element of any type (its registers are
// floats), so the element size does not enter.
template <int W>
struct BwdCfTraits {
  static constexpr int kMaxPerLane = W <= 4 ? 4 : 2;
  static constexpr int kMinBlocks = 2;
};

// Backward of long rows on the vector path (bwd_cf_stream_kernel): as
// FwdStreamTraits with x and dout (ring slots of 1 KiB per team, 40 KiB per
// block at 4). Chunks of at most kSteps steps: 16 (4096 elements) in 16-bit
// types, 32 (also 4096) in fp32, whose steps hold half the elements (on
// H200, 32 against 16: ragged-mixed fp32 bwd 83.9 -> 85.4 % of a copy,
// 8x4096x4096-W8 93.9 -> 96.5, 8x4096x4096 98.6 -> 97.3).
struct BwdStreamTraits {
  static constexpr int kSteps = 16;
  static constexpr int kStepsF32 = 32;
  static constexpr int kPrefetch = 4;
  static constexpr int kMinBlocks = 2;
  static_assert(kPrefetch >= 1 && kPrefetch <= 5, "ring of 2..6 KiB per team");
};

// Backward of 16-bit long rows whose B rows of a channel hold at most
// kSteps steps in all, each row a single chunk (bwd_cf_walk_kernel): a
// team walks the B rows of a channel and stores dweight/dbias itself (no
// partials, no reduce_dw_kernel). kSteps = 0 turns the walk off. 128:
// 8x4096x4096 and 16x5120x2048 (B x 16 and B x 8 steps = 128) walk rather
// than start a team per row; measured better at 128 than at 32. Rows on
// the shifted grid are walked too. A tile walks several consecutive
// channels (channels_per_tile, a power of two, their steps together at
// most kTileSteps) while the launch keeps at least kTiles walked tiles:
// the ring then runs on from channel to channel instead of filling and
// draining around each one (64 x 1x512x1024 bf16: 53 -> 75 % of a copy,
// H200). kTiles 4096, two rounds of the teams an H200 holds (132 SMs x
// 16; 2048 was within 0.5 points). kTileSteps 32: groups of up to 128
// steps left the mixed-length launch's end to its longest tiles (its bf16
// backward 64 -> 59 % with its shifted rows walked; 67.6 at 32).
struct BwdWalkTraits {
  static constexpr int kSteps = 128;
  static constexpr int kTileSteps = 32;
  static constexpr int64_t kTiles = 4096;
  static constexpr int kTeams = 8;
  static constexpr int kMinBlocks = BwdStreamTraits::kMinBlocks;
};

// Backward short rows (bwd_cf_short_kernel, rows_per_tile > 1 on the vector
// path): a team walks rows kTeam / lanes_per_row at a time (a step of kTeam
// vectors), the loads of the next kPrefetch steps in flight in a ring of
// kPrefetch + 1 slots of 1 KiB per team. kPersist false (fp32): one tile
// per team (bwd_cf_rows_team); a tile holds at most kSteps steps and kTeam
// rows, fewer when the launch's short rows make fewer than kTiles tiles.
// kPersist true (fp16/bf16): the launcher gives the kernel no more blocks
// than the device holds at once (SM count x kMinBlocks) and each team takes
// an even, contiguous share of the tiles, walked as one run per segment
// (bwd_cf_run_team); tiles are then of one step (at least 2 rows). A step's
// dweight/dbias sums per lane go to the team's shared record of the last
// kSumSteps steps, whose rows are summed and stored together
// (flush_row_sums).
template <int kElemBytes>
struct BwdShortTraits {
  // Teams per block; kMinBlocks counts blocks of kTeams teams (the same
  // threads per SM as 3 (fp32) / 2 blocks of 8 teams). 4 and 2 teams were
  // within 0.3 points of 8 on the fused and mixed-length launches (H200,
  // 2026-11-29); 4 leave room for the row sums in static shared memory.
  static constexpr int kTeams = 4;
  static constexpr int kMinBlocks = (kElemBytes == 4 ? 3 : 2) * 8 / kTeams;
  static constexpr int kPrefetch = 4;
  static constexpr int kSumSteps = 4;
  static_assert(kSumSteps <= kMinLanesPerRow, "a row group of kSumSteps steps holds at most kTeam rows");
  static constexpr bool kPersist = kElemBytes != 4;
  static constexpr int kSteps = kPersist ? 1 : 16;  // steps per tile (planner cap)
  static constexpr int64_t kTiles = 4096;
  static_assert(kPrefetch >= 1 && kPrefetch <= 5, "ring of 2..6 KiB per team");
};

// Channel-last fast path: a block of kClCols (channel vectors) x kClRows
// (time chunks) threads; each thread streams kSteps time steps of its
// channel vector (kVec channels; the scalar path, one).
inline constexpr int kClCols = 32;
inline constexpr int kClRows = 8;

// Forward, channel-last, vector path: 32 steps walked one at a time with x
// of the next kPrefetch steps in flight in a shared-memory ring
// (fwd_cl_ring; kPrefetch + 1 slots of 2 KiB per block in 16-bit types, 4
// KiB in fp32), 3 blocks/SM (32 steps: a thread's start, divisions and
// window loads, is paid half as often as at 16; on H200 that outweighed
// the fewer blocks). fp32 took 8 steps with all of a thread's loads in
// registers before (116-148 registers, 2 blocks/SM: 80 % of a copy on
// 4x2048x2048, 32 % at W = 8; the ring: 88 % and 85 %). The scalar path
// walks the same 32 steps in register windows of 8. kSteps is the default:
// in 16-bit types the planner lengthens a launch's steps up to twice that
// when it evens out the last wave (ClFwdSteps: 4x2048x2048 bf16, 512
// tiles in 1.3 waves of the H200's 396 resident blocks, become 384 in
// one). 16-bit rings 16 steps deep (34 KiB per block; 4x2048x2048 bf16 on
// H200: 82.3 % of a copy at 8, 83.6 at 12, 84.3 at 16; 22 lost 2.7); fp32
// 8 (11: -0.8 at W = 4, +1.3 at W = 8). kVec 4: 8- or 16-byte vectors (16
// bytes of 16-bit types, 8 channels at 2 blocks/SM: 73.9 against 82.0).
// Wider filters hold longer windows: one block fewer per SM past W = 6.
template <int kElemBytes, int W = 4>
struct FwdClTraits {
  static constexpr int kSteps = 32;
  static constexpr int kVec = 4;
  static constexpr int kMinBlocks = 3 - (W <= 6 ? 0 : 1);
  static constexpr int kPrefetch = kElemBytes == 2 ? 16 : 8;
  // The ring walk unrolled by W-1 steps (no window moves); at W = 6 that
  // needs more than its 80 registers.
  static constexpr bool kRotate = W != 6;
  static_assert(kVec == 4 || kVec == 8, "8- or 16-byte vectors");
};

// Backward, channel-last: each thread walks kSteps steps (plus W-1 of right
// halo). On the vector path the x and dout vectors of the next kPrefetch
// steps are in flight while a step is computed (a shared-memory ring of
// kPrefetch + 1 slots; 40 KiB per block for fp32 at 4, 36 KiB for 16-bit
// at 8); the scalar path loads groups of kGroup steps into registers, the
// next group's loads in flight while the current one is computed. kRotate
// unrolls the ring loop by W-1 steps.
template <int kElemBytes, int W>
struct BwdClTraits {
  static constexpr int kSteps = 64;
  static constexpr int kGroup = kElemBytes == 4 ? 2 : 4;
  static constexpr int kPrefetch = kElemBytes == 4 ? 4 : 8;
  // Past W = 5 the windows and dweight sums of 4 channels need more than
  // 128 registers: one block per SM rather than spills.
  static constexpr int kMinBlocks = W <= 5 ? 2 : 1;
  // W = 5 unrolled by W-1 needs more than its 128 registers.
  static constexpr bool kRotate = W != 5;
  static constexpr int kVec = 4;
  // Bytes of one block's ring (slots x {x, dout} x threads x vector).
  static constexpr int kRingBytes = (kPrefetch + 1) * 2 * kClCols * kClRows * kVec * kElemBytes;
  static_assert(kPrefetch >= 1 && kRingBytes <= 48 * 1024, "the ring fits static shared memory");
};

// General path: one thread per element. Update: one thread per row
// (kGenBlock per block), or on the vector path one per 16 bytes of x worth
// of rows, kUpdBlock per block.
inline constexpr int kGenBlock = 256;
inline constexpr int kUpdBlock = 128;

// The names the kernels and the planner use.
inline constexpr int kMaxPerLaneFwd = FwdCfTraits<4>::kMaxPerLane;
constexpr int MaxPerLaneBwd(int width) {
  return width <= 4 ? BwdCfTraits<4>::kMaxPerLane : BwdCfTraits<8>::kMaxPerLane;
}
constexpr int BwdStreamSteps(int elem_bytes) {
  return elem_bytes == 4 ? BwdStreamTraits::kStepsF32 : BwdStreamTraits::kSteps;
}
inline constexpr int kBwdStreamPrefetch = BwdStreamTraits::kPrefetch;
inline constexpr int kFwdStreamTeams = FwdStreamTraits<4, 4>::kTeams;
inline constexpr int kFwdStreamSteps = FwdStreamTraits<4, 4>::kSteps;
inline constexpr int kFwdStreamPrefetch = FwdStreamTraits<4, 4>::kPrefetch;
inline constexpr int kFwdWalkRowSteps = FwdWalkTraits<4>::kRowSteps;
inline constexpr int kFwdWalkTileSteps = FwdWalkTraits<4>::kTileSteps;
inline constexpr int64_t kFwdWalkTiles = FwdWalkTraits<4>::kTiles;
inline constexpr int kFwdWalkTeams = FwdWalkTraits<4>::kTeams;
inline constexpr int kBwdWalkSteps = BwdWalkTraits::kSteps;
inline constexpr int kBwdWalkTeams = BwdWalkTraits::kTeams;
inline constexpr int64_t kBwdWalkTiles = BwdWalkTraits::kTiles;
inline constexpr int kBwdWalkTileSteps = BwdWalkTraits::kTileSteps;
constexpr int BwdShortMinBlocks(int elem_bytes) {
  return elem_bytes == 4 ? BwdShortTraits<4>::kMinBlocks : BwdShortTraits<2>::kMinBlocks;
}
constexpr int BwdShortTeams(int elem_bytes) {
  return elem_bytes == 4 ? BwdShortTraits<4>::kTeams : BwdShortTraits<2>::kTeams;
}
constexpr bool BwdShortPersist(int elem_bytes) {
  return elem_bytes == 4 ? BwdShortTraits<4>::kPersist : BwdShortTraits<2>::kPersist;
}
inline constexpr int kBwdShortPrefetch = BwdShortTraits<4>::kPrefetch;
inline constexpr int kBwdShortSumSteps = BwdShortTraits<4>::kSumSteps;
constexpr int BwdShortSteps(int elem_bytes) {
  return elem_bytes == 4 ? BwdShortTraits<4>::kSteps : BwdShortTraits<2>::kSteps;
}
inline constexpr int64_t kBwdShortTiles = BwdShortTraits<4>::kTiles;
inline constexpr int kFwdShortPrefetch = FwdShortTraits<4>::kPrefetch;
inline constexpr int kFwdShortTeams = FwdShortTraits<4>::kTeams;
inline constexpr int kFwdShortSteps = FwdShortTraits<4>::kSteps;
inline constexpr int64_t kFwdShortTiles = FwdShortTraits<4>::kTiles;
constexpr int ClStepsFwd(int elem_bytes) {
  return elem_bytes == 4 ? FwdClTraits<4>::kSteps : FwdClTraits<2>::kSteps;
}
constexpr int ClVecFwd(int elem_bytes) {
  return elem_bytes == 4 ? FwdClTraits<4>::kVec : FwdClTraits<2>::kVec;
}
constexpr int ClFwdMinBlocks(int elem_bytes) {
  return elem_bytes == 4 ? FwdClTraits<4>::kMinBlocks : FwdClTraits<2>::kMinBlocks;
}
inline constexpr int kClVecBwd = BwdClTraits<4, 4>::kVec;
inline constexpr int kClStepsBwd = BwdClTraits<4, 4>::kSteps;
inline constexpr int kClGroupBwd32 = BwdClTraits<4, 4>::kGroup;
inline constexpr int kClGroupBwd16 = BwdClTraits<2, 4>::kGroup;
constexpr int ClBwdPrefetch(int elem_bytes) {
  return elem_bytes == 4 ? BwdClTraits<4, 4>::kPrefetch : BwdClTraits<2, 4>::kPrefetch;
}
constexpr int ClBwdRingBytes(int elem_bytes) {
  return elem_bytes == 4 ? BwdClTraits<4, 4>::kRingBytes : BwdClTraits<2, 4>::kRingBytes;
}

inline constexpr int64_t kMaxGridBlocks = int64_t{1} << 22;

inline int ElemBytes(ScalarType t) { return t == ScalarType::kF32 ? 4 : 2; }
// Fast paths: W = kMinFastWidth..kMaxFastWidth (W = 1 is pointwise and
// takes the general path, as do widths past kMaxFastWidth).
inline constexpr int kMinFastWidth = 2;
inline constexpr int kMaxFastWidth = 8;
inline bool FastWidth(int32_t w) { return w >= kMinFastWidth && w <= kMaxFastWidth; }
// Channel-first vector paths that pass a row's halo (W-1 elements) from
// lane to lane need it to fit in one 16-byte vector of `ne` elements (short
// rows); the long rows (fwd_cf_stream_team, bwd_cf_stream_team) take a
// longer halo from the previous or next two lanes (fp32 at W 6..8). The
// planner keeps other segments on the scalar path (see Conv1dPlan).
constexpr bool HaloInVector(int width, int ne) { return width - 1 < ne; }

// Compile-time dispatch: WidthSwitch(w, f) calls f(Int<W>{}) for the fast
// width W == w and returns true, or returns false for any other w;
// BoolSwitch(b, f) (conv1d_device.h, host and device) calls f(Bool<b>{}).
// f reads the value as
// decltype(arg)::value, a constant expression (a template argument).
template <int V>
struct Int {
  static constexpr int value = V;
};
template <bool V>
struct Bool {
  static constexpr bool value = V;
};
template <int W = kMinFastWidth, class F>
bool WidthSwitch(int w, F&& f) {
  if constexpr (W > kMaxFastWidth) {
    return false;
  } else {
    if (w == W) {
      f(Int<W>{});
      return true;
    }
    return WidthSwitch<W + 1>(w, f);
  }
}

// Launchers (one per kernel family); return the launch's error code.
using Stream = void*;  // hipStream_t / cudaStream_t, both pointer types
int32_t LaunchFwdChannelFirst(const Conv1dProblem& p, const Conv1dPlanInfo& plan,
                              const Conv1dSegment* segs, void* ws, Stream s);
int32_t LaunchFwdChannelLast(const Conv1dProblem& p, const Conv1dPlanInfo& plan,
                             const Conv1dSegment* segs, void* ws, Stream s);
// Blocks of a kernel of the given type and width that the current device
// holds at once (multiprocessors times blocks per multiprocessor), or 0
// when the runtime cannot say; kBwdClCooperative also 0 when the device
// cannot launch cooperatively. Cached per thread, device, kernel, type and
// width (resident_blocks.hip).
enum class ResidentKernel : int32_t { kFwdCl, kBwdClCooperative };
int64_t ResidentBlocks(ResidentKernel kernel, ScalarType type, int32_t width);
// Tests only: makes this thread's ResidentBlocks answer `blocks` for the
// current device, kernel, type and width, and returns the count it
// answered before (0 when the runtime cannot name the device). A count
// above what the device holds makes LaunchBwdChannelLast try a cooperative
// launch the runtime refuses, which is how its fallback is tested.
int64_t SetResidentBlocksForTesting(ResidentKernel kernel, ScalarType type, int32_t width, int64_t blocks);
// The channel-last forward's, for p's type and width.
inline int64_t FwdClResidentBlocks(const Conv1dProblem& p) {
  return ResidentBlocks(ResidentKernel::kFwdCl, p.x_type, p.width);
}
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
