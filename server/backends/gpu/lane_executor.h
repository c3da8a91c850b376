// The lane executor: carries out one round's TransferPlan on a lane (pinned
// staging and device buffer, a stream, events) and the device's shared copy
// streams: host copies into staging, DMAs in one batch per direction, the
// gather copy kernel, the fused launch, the scatter kernel, the DMAs back,
// the host copies out of staging and the weight-gradient reductions.
//
// It decides nothing about where a tensor goes (transfer_plan.h does); it
// only turns lane offsets into the lane's addresses and queues the work.
// Not a public header of the backend.
//
// Thread-safety: ExecuteRound runs on the lane's own thread (Backend
// contract); the device's shared streams are taken under their locks.
#ifndef CONV1D_SERVER_BACKENDS_GPU_LANE_EXECUTOR_H_
#define CONV1D_SERVER_BACKENDS_GPU_LANE_EXECUTOR_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "kernels/conv1d_kernels.h"
#include "server/backends/gpu/gpu_backend_internal.h"
#include "server/backends/gpu/transfer_plan.h"
#include "server/core/backend.h"

namespace conv1d::gpu {

// What one round needs besides its plan.
struct RoundContext {
  const BatchKey* key = nullptr;
  absl::Span<ConvSegment* const> segments;
  const Round* round = nullptr;
  const kernels::Conv1dProblem* problem = nullptr;
  // Device copies of each segment's weights where resident (by segment).
  absl::Span<const DeviceWeights> resident;
  // Per segment: how many pieces (over all rounds) it was cut into, and the
  // fp32 sums of dweight / dbias of segments cut into several.
  absl::Span<const int32_t> pieces_of;
  std::vector<std::vector<float>>* dweight_sums = nullptr;
  std::vector<std::vector<float>>* dbias_sums = nullptr;
  ThreadPool* pack_pool = nullptr;  // may be null
  const GpuBackendOptions* options = nullptr;
};

// Runs one planned round to completion (the lane's last event waited on).
absl::Status ExecuteRound(GpuBackend::Lane& lane, GpuBackend::Device& device,
                          const RoundPlan& plan, const RoundContext& ctx, BatchStats* stats);

// Writes n fp32 values as `dtype` (plain copy for fp32).
void StoreFloats(void* dst, DType dtype, const float* src, int64_t n);

// StoreFloats into a request's output, wherever it is: host memory
// directly, device memory (a device region) through a host copy and a
// synchronous copy to the device.
absl::Status StoreOutputFloats(const OutputView& out, DType dtype, const float* src,
                               int64_t n);

}  // namespace conv1d::gpu

#endif  // CONV1D_SERVER_BACKENDS_GPU_LANE_EXECUTOR_H_
