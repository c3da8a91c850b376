// Per-device and per-lane state of GpuBackend, shared by its two source
// files (gpu_backend.cc: set-up; gpu_batch.cc: running a batch). Not a
// public header. Thread-safety as documented on each member.
#ifndef CONV1D_SERVER_BACKENDS_GPU_GPU_BACKEND_INTERNAL_H_
#define CONV1D_SERVER_BACKENDS_GPU_GPU_BACKEND_INTERNAL_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "kernels/batch_copy.h"
#include "kernels/conv1d_kernels.h"
#include "server/backends/gpu/gpu_backend.h"
#include "server/backends/gpu/gpu_runtime.h"
#include "server/backends/gpu/weight_cache.h"

namespace conv1d {

struct GpuBackend::Device {
  int index = 0;  // runtime device id
  std::string name;
  int64_t total_memory_bytes = 0;
  void* device_pool = nullptr;  // lane buffers, workspaces, weight region
  int64_t device_pool_bytes = 0;
  void* pinned_pool = nullptr;  // lane staging, then the lanes' copy tables
  int64_t pinned_pool_bytes = 0;
  std::unique_ptr<gpu::WeightCache> weights;  // thread-safe
  // With shared_copy_streams: the device's H2D and D2H streams, each with a
  // lock held while one lane queues its copies of a batch (so they stay
  // together in the stream).
  hipStream_t h2d_stream = nullptr;
  hipStream_t d2h_stream = nullptr;
  absl::Mutex h2d_mu;
  absl::Mutex d2h_mu;

  std::atomic<bool> failed{false};
  mutable absl::Mutex mu;
  absl::Status error ABSL_GUARDED_BY(mu);
};

// One memcpy of a pack or unpack step.
struct CopyJob {
  void* dst;
  const void* src;
  int64_t bytes;
};

// Where an injected fault strikes (GpuBackendOptions::inject_fault).
enum class FaultPoint { kLaunch, kCopy };

// A lane's injected faults: every `every`-th pass through `point` fails with
// hipErrorInvalidValue, as a refused launch or copy would (not a sticky
// error: the batch fails, the device goes on).
struct LaneFault {
  FaultPoint point = FaultPoint::kLaunch;
  int64_t every = 0;  // 0: never
  int64_t passes = 0;
  hipError_t Check(FaultPoint at) {
    if (every <= 0 || at != point) return hipSuccess;
    return ++passes % every == 0 ? hipErrorInvalidValue : hipSuccess;
  }
};

// Touched only by its lane's thread (and by set-up/tear-down).
struct GpuBackend::Lane {
  int index = 0;
  Device* device = nullptr;
  hipStream_t stream = nullptr;
  hipEvent_t events[4] = {};  // before H2D, after H2D, after kernel, after D2H
  char* pinned = nullptr;     // staging, lane_buffer_bytes
  char* buffer = nullptr;     // device twin of `pinned`
  void* workspace = nullptr;  // kernel workspace (needs no initialisation)
  int64_t workspace_bytes = 0;
  std::vector<kernels::Conv1dSegment> table;  // host copy of the segment table
  // Page-locked chunk tables of the gather (host pool -> device) and scatter
  // (device -> host pool) copy kernels, kCopyTableEntries each.
  kernels::BatchCopyChunk* gather_table = nullptr;
  kernels::BatchCopyChunk* scatter_table = nullptr;
  // Scratch lists of a round, kept to reuse their memory.
  std::vector<CopyJob> jobs;
  std::vector<gpu::AsyncCopy> h2d, d2h;
  LaneFault fault;
};

// Entries of each copy table of a lane: up to 128 MiB per direction and
// batch; tensors past that are packed through staging.
inline constexpr int32_t kCopyTableEntries = 8192;
inline constexpr int64_t kCopyTablesBytes =
    2 * kCopyTableEntries * static_cast<int64_t>(sizeof(kernels::BatchCopyChunk));

}  // namespace conv1d

#endif  // CONV1D_SERVER_BACKENDS_GPU_GPU_BACKEND_INTERNAL_H_
