// The GPU backend's side of registered shared-memory regions
// (server/core/memory_access.h):
//   - GpuHostMemoryPinner page-locks a client's system region once at
//     registration (hipHostRegister / cudaHostRegister, portable and mapped)
//     so that the transfer plan moves its tensors like the host pool's: by
//     DMA, the copy kernels or in place, with no staging copy.
//   - GpuDeviceMemoryImporter opens a device region's IPC handle once
//     (hipIpcOpenMemHandle / cudaIpcOpenMemHandle) on the named device, so
//     that the kernels read and write its tensors in place.
// GpuBackend makes one of each at start (host_memory_pinner(),
// device_memory_importer()); the server hands them to the registry.
//
// Thread-safety: both are thread-safe (they set the calling thread's
// current device, which every backend thread sets again before its own
// work) and need no backend object: they may outlive it.
#ifndef CONV1D_SERVER_BACKENDS_GPU_SHARED_REGIONS_H_
#define CONV1D_SERVER_BACKENDS_GPU_SHARED_REGIONS_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/core/memory_access.h"

namespace conv1d::gpu {

class GpuHostMemoryPinner final : public HostMemoryPinner {
 public:
  // `devices`: the runtime indices the backend computes on (non-empty).
  // `same_address`: the backend's copy kernels and in-place reads use host
  // addresses as they are, so every device must see the pinned memory at
  // its host address (Pin refuses memory it cannot map that way).
  GpuHostMemoryPinner(std::vector<int> devices, bool same_address)
      : devices_(std::move(devices)), same_address_(same_address) {}

  // FAILED_PRECONDITION with the runtime's reason when the memory cannot be
  // page-locked (or mapped at its address), also logged as a warning; the
  // registry then stages it.
  absl::Status Pin(void* data, int64_t bytes) override;
  void Unpin(void* data) override;

 private:
  absl::Status PinOnDevices(void* data, int64_t bytes);

  const std::vector<int> devices_;
  const bool same_address_;
};

class GpuDeviceMemoryImporter final : public DeviceMemoryImporter {
 public:
  // `devices`: the runtime indices the backend computes on (non-empty).
  explicit GpuDeviceMemoryImporter(std::vector<int> devices) : devices_(std::move(devices)) {}

  int64_t handle_bytes() const override;
  // INVALID_ARGUMENT for a device the backend does not use;
  // FAILED_PRECONDITION when the runtime refuses the handle. Requests with
  // tensors in the region then run on that device's lanes (BatchKey::device,
  // DeviceAffinity).
  absl::StatusOr<ImportedDeviceMemory> Open(absl::string_view handle,
                                            int32_t device) override;
  // Closes the handle once the last region opened from it is closed.
  void Close(void* address, int32_t device) override;

 private:
  struct Opened {
    ImportedDeviceMemory memory;
    int regions = 0;
  };
  const std::vector<int> devices_;
  // A handle opened on a device is opened once however many regions name
  // it (the runtime may refuse a second open in one process).
  absl::Mutex mu_;
  std::map<std::pair<std::string, int32_t>, Opened> opened_ ABSL_GUARDED_BY(mu_);
};

}  // namespace conv1d::gpu

#endif  // CONV1D_SERVER_BACKENDS_GPU_SHARED_REGIONS_H_
