// Host API of the fused ragged-batch causal depthwise conv1d kernels
// (forward, backward, decode update), CUTLASS-style:
//
//   1. Conv1dCanImplement(problem, segments, n)  -> hipSuccess or
//      hipErrorInvalidValue (argument check, no device work);
//   2. Conv1dPlan(problem, segments, n, &plan)   -> fills the scheduling
//      fields of the *host* segment table and the plan (tile count,
//      workspace_bytes); host code, deterministic for a given device kind
//      (the channel-last forward sizes its tiles to the current device's
//      resident blocks, a query cached per thread; results do not depend
//      on it);
//   3. copy the planned table to device memory (the server packs it with the
//      inputs into one H2D copy);
//   4. Conv1dRun(problem, plan, device_segments, workspace, stream)
//      -> enqueues the kernels on `stream` and returns the runtime's error
//      code of the launch (hipSuccess, or why it failed). Never throws.
//      The kernels of one run may overlap one another (dependent launches
//      on CUDA); whatever the stream does next sees all of them finished.
//
// Workspace: `plan.workspace_bytes` of device memory (0 for forward and
// update), 256-byte aligned, needing no initialisation. One workspace must
// not be used by two runs at the same time (use one per stream or lane).
//
// Determinism: dweight/dbias are reduced in a fixed order (per row-chunk
// fp32 partials in the workspace, then a second small kernel that sums each
// channel's partials of its own segment in index order), so results are
// bitwise reproducible run to run and never mix segments.
//
// Thread-safety: every function is reentrant; Conv1dRun only reads `plan`
// and the problem, and touches device memory through the stream.
#ifndef CONV1D_KERNELS_CONV1D_KERNELS_H_
#define CONV1D_KERNELS_CONV1D_KERNELS_H_

#include <cstdint>

#include "kernels/conv1d_params.h"
#include "kernels/gpu_compat.h"

namespace conv1d::kernels {

// Checks the problem and every segment: dtype pairs (weight kF32 or x_type;
// grad weight kF32 or weight_type), 1 <= W <= kMaxKernelWidth, D >= 1, B, L >= 1,
// state_len >= W-1 for update, and that every tensor the op reads or writes
// is non-null. Alignment is not required: misaligned segments take a scalar
// path.
hipError_t Conv1dCanImplement(const Conv1dProblem& problem,
                              const Conv1dSegment* host_segments, int32_t num_segments);

// Plans the launch: writes the scheduling fields of `host_segments` and
// `*plan`, and orders the table by kernel family (stable within a family)
// so that each family's tiles form one contiguous range; every segment
// keeps its tensors, and `source_index` holds its index in the table as
// given. Calls Conv1dCanImplement first and returns its error (the table
// is then unchanged).
hipError_t Conv1dPlan(const Conv1dProblem& problem, Conv1dSegment* host_segments,
                      int32_t num_segments, Conv1dPlanInfo* plan);

// Workspace bytes that Conv1dRun needs for a launch of segments of these
// sizes, whatever their tensors' alignment: at least the workspace_bytes
// Conv1dPlan reports for any table of the same sizes (0 unless backward).
// Sizes only, so a caller can size its buffers before it has pointers.
// -1 for an invalid problem or size. Pure host code.
int64_t Conv1dWorkspaceBytes(const Conv1dProblem& problem, const Conv1dSegmentSize* sizes,
                             int32_t num_segments);

// Enqueues the launch. `device_segments` holds the planned table (same
// contents as the host copy given to Conv1dPlan). `workspace` may be null
// when plan.workspace_bytes is 0.
hipError_t Conv1dRun(const Conv1dProblem& problem, const Conv1dPlanInfo& plan,
                     const Conv1dSegment* device_segments, void* workspace,
                     int64_t workspace_bytes, hipStream_t stream);

// True when the launch moves every activation and state element of a
// segment of this length (and, for the update, state length) in whole-line
// passes that read and write each element once: what makes it cheap for
// those tensors to stay in page-locked host memory that the kernel reads
// and writes in place over the bus. Today the forward's short rows
// (channel-first, W 2..8; scalar: at most 32 elements, not a whole number
// of 16-byte vectors; vector: at most 32 whole 16-byte vectors) and the
// update's vector path (W 2..8, one token, a state of W-1, D a whole
// number of 16-byte vectors). The vector paths also need their tensors
// 16-byte aligned, which the planner checks. Pure host code.
bool Conv1dStreamsInPlace(const Conv1dProblem& problem, int64_t seqlen, int64_t state_len);

}  // namespace conv1d::kernels

#endif  // CONV1D_KERNELS_CONV1D_KERNELS_H_
