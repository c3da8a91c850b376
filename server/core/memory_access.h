// How the shared-memory registry (shm_registry.h) reaches memory that only a
// backend's runtime can prepare: page-locking a client's system region for
// DMA, and opening device memory another process exported (CUDA/HIP IPC).
//
// The core owns these interfaces; the GPU backend implements them
// (server/backends/gpu/shared_regions.h) and the server injects them into
// the registry at start-up, as it injects the backend's HostBufferProvider
// into the frontends. Backends without them (cpu, echo) return null from
// Backend::host_memory_pinner() / device_memory_importer(): system regions
// are then staged like heap memory and device regions are refused.
// Fakes for tests live beside their users (tests/oip/shm_registry_test.cc,
// tests/oip/device_region_test.cc, tests/oip/oip_device_region_test.cc).
//
// Thread-safety: implementations are thread-safe, and may be called after
// the backend that made them is gone (a region outlives its registry while
// a request still holds it).
#ifndef CONV1D_SERVER_CORE_MEMORY_ACCESS_H_
#define CONV1D_SERVER_CORE_MEMORY_ACCESS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace conv1d {

// Page-locks host memory for a backend's DMA engines and kernels (e.g.
// cudaHostRegister / hipHostRegister).
class HostMemoryPinner {
 public:
  virtual ~HostMemoryPinner() = default;
  // OK when [data, data + bytes) is now page-locked and the backend moves it
  // like its own pinned pool; otherwise why not (the caller then stages the
  // memory like heap memory).
  virtual absl::Status Pin(void* data, int64_t bytes) = 0;
  // Undoes a successful Pin of `data`.
  virtual void Unpin(void* data) = 0;
};

// Device memory opened from another process's export handle.
struct ImportedDeviceMemory {
  void* address = nullptr;  // device address of the exported allocation
  // Bytes of the allocation from `address` on: a region may not claim more.
  int64_t bytes = 0;
};

// Opens device memory exported by a co-located process (cudaIpcMemHandle_t
// / hipIpcMemHandle_t bytes) on one device, and closes it again.
class DeviceMemoryImporter {
 public:
  virtual ~DeviceMemoryImporter() = default;
  // Bytes of an export handle this importer takes.
  virtual int64_t handle_bytes() const = 0;
  // Opens `handle` on device `device` (a runtime device index).
  // INVALID_ARGUMENT for a handle of the wrong size or a device the backend
  // does not compute on; FAILED_PRECONDITION when the runtime refuses the
  // handle (freed by its owner, made in this very process, another machine).
  virtual absl::StatusOr<ImportedDeviceMemory> Open(absl::string_view handle,
                                                    int32_t device) = 0;
  // Closes what Open returned; called once no request uses it.
  virtual void Close(void* address, int32_t device) = 0;
};

}  // namespace conv1d

#endif  // CONV1D_SERVER_CORE_MEMORY_ACCESS_H_
