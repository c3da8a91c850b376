#include "server/backends/gpu/gpu_runtime.h"

#include <atomic>
#include <vector>

#include "absl/strings/str_cat.h"

#if defined(CONV1D_PLATFORM_CUDA)
#include <cuda.h>
#endif

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

hipError_t MemcpyAsyncMany(absl::Span<const AsyncCopy> copies, hipMemcpyKind kind,
                           hipStream_t stream, bool batched, int64_t* bytes) {
#if defined(CONV1D_PLATFORM_CUDA) && defined(CUDART_VERSION) && CUDART_VERSION >= 12080
  if (batched && copies.size() > 1) {
    thread_local std::vector<void*> dsts;
    thread_local std::vector<const void*> srcs;
    thread_local std::vector<size_t> sizes;
    dsts.clear();
    srcs.clear();
    sizes.clear();
    int64_t total = 0;
    for (const AsyncCopy& c : copies) {
      dsts.push_back(c.dst);
      srcs.push_back(c.src);
      sizes.push_back(static_cast<size_t>(c.bytes));
      total += c.bytes;
    }
    cudaMemcpyAttributes attr{};
    attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    size_t first = 0;
    const hipError_t err = cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(),
                                                copies.size(), &attr, &first, 1, stream);
    if (err == hipSuccess) *bytes += total;
    return err;
  }
#endif
  (void)batched;
  for (const AsyncCopy& c : copies) {
    const hipError_t err = hipMemcpyAsync(c.dst, c.src, c.bytes, kind, stream);
    if (err != hipSuccess) return err;
    *bytes += c.bytes;
  }
  return hipSuccess;
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

hipError_t AllocationRange(void* ptr, void** base, int64_t* bytes) {
#if defined(CONV1D_PLATFORM_CUDA)
  // The driver call without linking the driver library: the server must
  // start on machines without a driver (it then serves from the CPU).
  using GetRange = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);
  static GetRange get_range = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000,
                                         cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      fn = nullptr;
    }
    return reinterpret_cast<GetRange>(fn);
  }();
  if (get_range == nullptr) return cudaErrorNotSupported;
  CUdeviceptr b = 0;
  size_t size = 0;
  if (get_range(&b, &size, reinterpret_cast<CUdeviceptr>(ptr)) != CUDA_SUCCESS) {
    return cudaErrorInvalidValue;
  }
  *base = reinterpret_cast<void*>(b);
  *bytes = static_cast<int64_t>(size);
  return cudaSuccess;
#else
  hipDeviceptr_t b = nullptr;
  size_t size = 0;
  const hipError_t err = hipMemGetAddressRange(&b, &size, ptr);
  if (err != hipSuccess) return err;
  *base = b;
  *bytes = static_cast<int64_t>(size);
  return hipSuccess;
#endif
}

int64_t AllocationCount() { return g_allocations.load(std::memory_order_relaxed); }

}  // namespace conv1d::gpu
