// The GPU runtime calls the gpu backend makes (device memory, pinned host
// memory, streams, events), on top of kernels/gpu_compat.h, plus the one
// helper that turns a runtime error code into an absl::Status.
//
// Every allocation the backend makes goes through DeviceAlloc/PinnedAlloc so
// that AllocationCount() can prove none happens on the request path.
// Thread-safe: the counters are atomic; the runtime calls are thread-safe.
#ifndef CONV1D_SERVER_BACKENDS_GPU_GPU_RUNTIME_H_
#define CONV1D_SERVER_BACKENDS_GPU_GPU_RUNTIME_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "kernels/gpu_compat.h"

#if defined(CONV1D_PLATFORM_CUDA)
#define hipSetDevice cudaSetDevice
#define hipMemcpyKind cudaMemcpyKind
#define hipMemGetInfo cudaMemGetInfo
#define hipStreamCreateWithFlags cudaStreamCreateWithFlags
#define hipStreamNonBlocking cudaStreamNonBlocking
#define hipStreamWaitEvent cudaStreamWaitEvent
#define hipEventCreateWithFlags cudaEventCreateWithFlags
#define hipEventDefault cudaEventDefault
#define hipEventBlockingSync cudaEventBlockingSync
#define hipDeviceReset cudaDeviceReset
#define hipMemcpy2DAsync cudaMemcpy2DAsync
#define hipMemset2DAsync cudaMemset2DAsync
#define hipErrorMemoryAllocation cudaErrorMemoryAllocation
#define hipHostRegister cudaHostRegister
#define hipHostUnregister cudaHostUnregister
#define hipHostRegisterPortable cudaHostRegisterPortable
#define hipHostRegisterMapped cudaHostRegisterMapped
#endif

namespace conv1d::gpu {

// OK for hipSuccess; otherwise INTERNAL "<what>: <runtime message>".
absl::Status GpuStatus(hipError_t err, absl::string_view what);

// True when `err` leaves the device unusable (the context is corrupted and
// every later call on it fails): such a device must stop serving.
bool IsStickyError(hipError_t err);

// One asynchronous copy.
struct AsyncCopy {
  void* dst;
  const void* src;
  int64_t bytes;
};

// Queues `copies` on `stream` in order. With `batched`, as one batch call
// where the runtime has a dependable one (CUDA 12.8+: cudaMemcpyBatchAsync,
// which lets the driver pipeline them); HIP's hipMemcpyBatchAsync exists only
// from HIP 7.1 and mishandles its attributes before 7.13, so HIP (like older
// CUDA) queues one hipMemcpyAsync per copy. Adds the bytes queued to *bytes.
hipError_t MemcpyAsyncMany(absl::Span<const AsyncCopy> copies, hipMemcpyKind kind,
                           hipStream_t stream, bool batched, int64_t* bytes);

// Counted allocations (device memory and page-locked host memory).
hipError_t DeviceAlloc(void** ptr, int64_t bytes);
// `portable`: page-locked and mapped into every device's address space, not
// only the current one's.
hipError_t PinnedAlloc(void** ptr, int64_t bytes, bool portable = false);
void DeviceFree(void* ptr);
void PinnedFree(void* ptr);

// The allocation `ptr` points into: its base and size (cuMemGetAddressRange
// through the runtime's driver entry point on CUDA, hipMemGetAddressRange
// on HIP), on the current device.
hipError_t AllocationRange(void* ptr, void** base, int64_t* bytes);

// Number of DeviceAlloc + PinnedAlloc calls made by this process so far.
int64_t AllocationCount();

}  // namespace conv1d::gpu

#endif  // CONV1D_SERVER_BACKENDS_GPU_GPU_RUNTIME_H_
