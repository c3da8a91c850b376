// BatchLayout: how a fused batch is laid out in a lane's staging memory.
//
// A lane owns one pinned host buffer and one device buffer of the same size
// and layout. A batch becomes one or more rounds; each round is
//   [segment table | inputs of every piece | outputs of every piece]
// so that one H2D copy moves the table and all inputs, one kernel launch
// computes, and one D2H copy brings back all outputs. A request too large
// for a lane is cut along B into pieces (rows [b_begin, b_begin + b_count))
// that go to successive rounds. dweight/dbias are always computed in fp32
// on the device (per piece) and summed/converted on the host, so splitting
// never changes their precision.
//
// Pure host code with no GPU dependency (unit-tested without a device).
// Plain values; no synchronisation.
#ifndef CONV1D_SERVER_BACKENDS_GPU_BATCH_LAYOUT_H_
#define CONV1D_SERVER_BACKENDS_GPU_BATCH_LAYOUT_H_

#include <array>
#include <cstdint>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "server/core/conv_problem.h"

namespace conv1d::gpu {

inline constexpr int64_t kSlotAlignBytes = 256;

// Rows [b_begin, b_begin + b_count) of segment `segment` of the batch.
struct Piece {
  int32_t segment = 0;
  int64_t b_begin = 0;
  int64_t b_count = 0;
};

// Byte offsets of one piece's tensors inside the lane buffer, by role; -1 =
// absent (not used by the op, not requested, or weights already on the
// device).
struct PieceSlots {
  std::array<int64_t, kNumRoles> at;
  PieceSlots() { at.fill(-1); }
  int64_t operator[](Role r) const { return at[RoleIndex(r)]; }
  int64_t& operator[](Role r) { return at[RoleIndex(r)]; }
};

struct Round {
  std::vector<Piece> pieces;
  std::vector<PieceSlots> slots;  // parallel to pieces
  int64_t table_offset = 0;       // segment table (always 0)
  int64_t table_bytes = 0;
  int64_t input_end = 0;          // H2D copies [0, input_end)
  int64_t output_begin = 0;       // D2H copies [output_begin, output_end)
  int64_t output_end = 0;
  int64_t workspace_bytes = 0;    // estimated kernel workspace
};

struct LayoutOptions {
  int64_t capacity_bytes = 0;    // lane buffer size
  int64_t workspace_bytes = 0;   // lane kernel workspace size
  int64_t table_entry_bytes = 0; // sizeof one segment-table entry
  // Kernel workspace a single piece needs (estimate; additive over pieces).
  absl::FunctionRef<int64_t(const ConvSegment&, int64_t b_count)> piece_workspace;
};

// The dtype weight and bias are staged in: the kernels take weights in fp32
// or the activation dtype, so other pairs (e.g. fp16 activations with bf16
// weights) are converted to fp32 while packing.
DType StagedWeightDType(const BatchKey& key);

// Bytes `role`'s tensor of a piece of `rows` rows takes in the lane buffer:
// the request's bytes, except weights (StagedWeightDType) and dweight/dbias
// (always fp32 on the device).
int64_t StagedBytes(const BatchKey& key, const ConvSegment& seg, Role role, int64_t rows);

// Plans the rounds of a batch. `weights_on_device[i]` says segment i's
// weight/bias need no staging. Fails with RESOURCE_EXHAUSTED naming
// lane_buffer_bytes when a single row of a request cannot fit a lane.
absl::StatusOr<std::vector<Round>> PlanRounds(
    const BatchKey& key, absl::Span<ConvSegment* const> segments,
    absl::Span<const bool> weights_on_device, const LayoutOptions& options);

// Smallest lane buffer that holds one row (b_count = 1) of `seg`.
int64_t MinLaneBytesFor(const BatchKey& key, const ConvSegment& seg,
                        int64_t table_entry_bytes);

}  // namespace conv1d::gpu

#endif  // CONV1D_SERVER_BACKENDS_GPU_BATCH_LAYOUT_H_
