#include "server/backends/gpu/gpu_runtime.h"

#include <atomic>

#include "absl/strings/str_cat.h"

namespace conv1d::gpu {
namespace {
std::atomic<int64_t> g_allocations{0};
}  // namespace

absl::Status GpuStatus(hipError_t err, absl::string_view what) {
  if (err == hipSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", hipGetErrorString(err),
                                          " (error ", static_cast<int>(err), ")"));
}

bool IsStickyError(hipError_t err) {
#if defined(CONV1D_PLATFORM_CUDA)
  switch (err) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorECCUncorrectable:
    case cudaErrorDevicesUnavailable:
      return true;
    default:
      return false;
  }
#else
  return err == hipErrorIllegalAddress || err == hipErrorLaunchFailure ||
         err == hipErrorECCNotCorrectable;
#endif
}

hipError_t DeviceAlloc(void** ptr, int64_t bytes) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return hipMalloc(ptr, static_cast<size_t>(bytes));
}

hipError_t PinnedAlloc(void** ptr, int64_t bytes, bool portable) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return hipHostMalloc(ptr, static_cast<size_t>(bytes),
                       portable ? hipHostMallocPortable | hipHostMallocMapped
                                : hipHostMallocDefault);
}

void DeviceFree(void* ptr) {
  if (ptr != nullptr) (void)hipFree(ptr);
}

void PinnedFree(void* ptr) {
  if (ptr != nullptr) (void)hipHostFree(ptr);
}

int64_t AllocationCount() { return g_allocations.load(std::memory_order_relaxed); }

}  // namespace conv1d::gpu
