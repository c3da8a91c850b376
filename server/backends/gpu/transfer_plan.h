// TransferPlan: how every tensor of one round of a fused batch reaches the
// kernel and comes back, decided on the host before anything is queued.
//
// For each role of each piece the plan picks a Move from the tensor's
// Placement (the memory kind its view carries), its size and alignment, and
// the piece's kind; the lane executor (gpu_batch.cc) then only carries the
// plan out: host copies into and out of pinned staging, DMAs, the gather and
// scatter copy kernels, the fused launch. Deciding apart from doing keeps
// every decision testable without a device (tests/runtime/transfer_plan_test).
//
// Addresses: the plan names lane memory by byte offset (the same offset in
// the lane's pinned staging and in its device buffer) and request memory by
// the view's own pointer (a host address for host kinds, a device address
// for device kinds).
//
// Pure host code, no GPU runtime. Plain values; no synchronisation.
#ifndef CONV1D_SERVER_BACKENDS_GPU_TRANSFER_PLAN_H_
#define CONV1D_SERVER_BACKENDS_GPU_TRANSFER_PLAN_H_

#include <array>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "server/backends/gpu/batch_layout.h"
#include "server/core/conv_problem.h"

namespace conv1d::gpu {

enum class Move : uint8_t {
  // The role is not used by the key.
  kNone,
  // An output not asked for: computed into its lane slot and dropped.
  kDiscard,
  // Copied by the host through the lane's pinned staging, which moves by one
  // DMA per run of adjacent slots.
  kStage,
  // Its own DMA between the request's page-locked memory and the lane slot.
  kDma,
  // Moved by the gather (inputs) or scatter (outputs) copy kernel, which
  // reads and writes page-locked host memory over the bus.
  kCopyKernel,
  // Read or written by the fused kernel where it is: small page-locked host
  // tensors of pieces the kernel streams in whole-line passes, and device
  // memory on the lane's device (a session's state slot, a device region).
  kInPlace,
  // Weights already on the device (the weight cache).
  kResident,
  // Weights in a dtype the kernels do not take: converted to fp32 by the
  // host into staging (weights in device memory are copied back first).
  kConvert,
  // dweight / dbias: an fp32 partial per piece in the lane buffer, brought
  // back through staging and summed or converted into the request by the
  // host (and copied to the request's device memory when it is there).
  kHostReduce,
};

const char* MoveName(Move move);

// What the lane can do, fixed at start-up.
struct MovePolicy {
  // Smallest page-locked tensor moved by its own DMA.
  int64_t direct_copy_bytes = int64_t{256} << 10;
  // The gather/scatter copy kernels can reach page-locked host memory.
  bool copy_kernels = false;
  // Small page-locked tensors of streaming pieces may be used in place
  // (needs copy_kernels: the same device mapping).
  bool in_place = false;
  // The device the lane runs on (device memory elsewhere is refused).
  int32_t device = 0;
};

// What the plan needs to know about one piece besides its segment.
struct PieceFacts {
  // The kernel moves this piece's activations and states in whole-line
  // passes (kernels::Conv1dStreamsInPlace), so host tensors may stay put.
  bool streams_in_place = false;
  // Its weights are on the device (the weight cache).
  bool weights_resident = false;
};

// The choice for one tensor of one piece. `address` is the request memory
// the piece's rows start at (null for kNone / kDiscard / kResident /
// kHostReduce); `bytes` the bytes of the piece in the request memory.
// Only `where`, `address` and `bytes` matter for the choice besides the
// role, the piece and the policy.
Move ChooseMove(Role role, bool used, bool present, const Placement& where,
                const void* address, int64_t bytes, bool convert_weights,
                const PieceFacts& piece, const MovePolicy& policy);

// A byte range between request memory and a lane offset.
struct LaneCopy {
  const void* host = nullptr;  // request memory (host or device address)
  int64_t lane_offset = 0;
  int64_t bytes = 0;
};

// One round's plan.
struct RoundPlan {
  // Per piece and role: the move, and where the kernel finds the tensor
  // (a lane offset, or request memory for kInPlace / device weights).
  struct Tensor {
    Move move = Move::kNone;
    int64_t lane_offset = -1;        // >= 0 when the kernel uses the lane slot
    const void* external = nullptr;  // kInPlace: the request's own address
  };
  std::vector<std::array<Tensor, kNumRoles>> tensors;  // parallel to pieces

  std::vector<LaneCopy> pack;      // host -> staging (memcpy)
  std::vector<LaneCopy> unpack;    // staging -> host (memcpy), after the round
  std::vector<LaneCopy> dma_in;    // request page-locked memory -> device
  std::vector<LaneCopy> dma_out;   // device -> request page-locked memory
  std::vector<LaneCopy> gather;    // by the gather copy kernel
  std::vector<LaneCopy> scatter;   // by the scatter copy kernel
  // Staging runs moved by DMA (table first), merged where adjacent.
  std::vector<LaneCopy> h2d_runs;  // `host` unused: staging at the same offset
  std::vector<LaneCopy> d2h_runs;
  int64_t in_place_in_bytes = 0;
  int64_t in_place_out_bytes = 0;
  int64_t gather_chunks = 0;
  int64_t scatter_chunks = 0;
};

// Chunks the copy kernels cut a range into: ceil(bytes / chunk_bytes).
struct CopyKernelLimits {
  int64_t chunk_bytes = int64_t{16} << 10;
  int64_t table_entries = 8192;  // per direction and round
};

// Plans one round. `facts` is parallel to round.pieces. Tensors the copy
// kernels would take past their table's capacity are staged instead.
// FAILED_PRECONDITION for device memory of another device.
absl::StatusOr<RoundPlan> PlanTransfers(const BatchKey& key,
                                        absl::Span<ConvSegment* const> segments,
                                        const Round& round,
                                        absl::Span<const PieceFacts> facts,
                                        const MovePolicy& policy,
                                        const CopyKernelLimits& copy_limits);

}  // namespace conv1d::gpu

#endif  // CONV1D_SERVER_BACKENDS_GPU_TRANSFER_PLAN_H_
