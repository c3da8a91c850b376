#include "server/backends/gpu/shared_regions.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/backends/gpu/gpu_runtime.h"
#include "spdlog/spdlog.h"

namespace conv1d::gpu {
namespace {

// The runtime's message for `err`, after clearing it from the thread's
// last-error slot (these failures are not sticky: the device goes on).
std::string RuntimeMessage(hipError_t err) {
  (void)hipGetLastError();
  return absl::StrCat(hipGetErrorString(err), " (error ", static_cast<int>(err), ")");
}

}  // namespace

absl::Status GpuHostMemoryPinner::Pin(void* data, int64_t bytes) {
  absl::Status st = PinOnDevices(data, bytes);
  if (!st.ok()) {
    spdlog::warn("a registered shared-memory region ({} bytes) stays pageable and is "
                 "staged: {}", bytes, std::string(st.message()));
  }
  return st;
}

absl::Status GpuHostMemoryPinner::PinOnDevices(void* data, int64_t bytes) {
  hipError_t err = hipSetDevice(devices_.front());
  if (err == hipSuccess) {
    err = hipHostRegister(data, static_cast<size_t>(bytes),
                          hipHostRegisterPortable | hipHostRegisterMapped);
  }
  if (err != hipSuccess) {
    return absl::FailedPreconditionError(
        absl::StrCat("page-locking ", bytes, " bytes: ", RuntimeMessage(err)));
  }
  if (!same_address_) return absl::OkStatus();
  for (int device : devices_) {
    void* device_view = nullptr;
    err = hipSetDevice(device);
    if (err == hipSuccess) err = hipHostGetDevicePointer(&device_view, data, 0);
    if (err != hipSuccess || device_view != data) {
      const std::string why =
          err != hipSuccess ? RuntimeMessage(err) : "it maps the memory at another address";
      (void)hipHostUnregister(data);
      (void)hipGetLastError();
      return absl::FailedPreconditionError(
          absl::StrCat("device ", device, " cannot use the page-locked region at its host "
                       "address: ", why));
    }
  }
  return absl::OkStatus();
}

void GpuHostMemoryPinner::Unpin(void* data) {
  if (hipHostUnregister(data) != hipSuccess) (void)hipGetLastError();
}

int64_t GpuDeviceMemoryImporter::handle_bytes() const {
  return static_cast<int64_t>(sizeof(hipIpcMemHandle_t));
}

absl::StatusOr<ImportedDeviceMemory> GpuDeviceMemoryImporter::Open(absl::string_view handle,
                                                                   int32_t device) {
  if (std::find(devices_.begin(), devices_.end(), device) == devices_.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device_id ", device, " is not a device this server computes on (",
        absl::StrJoin(devices_, ", "), ")"));
  }
  if (handle.size() != sizeof(hipIpcMemHandle_t)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "raw_handle has ", handle.size(), " bytes, expected ", sizeof(hipIpcMemHandle_t)));
  }
  absl::MutexLock lock(&mu_);
  auto key = std::make_pair(std::string(handle), device);
  if (auto it = opened_.find(key); it != opened_.end()) {
    ++it->second.regions;
    return it->second.memory;
  }
  hipIpcMemHandle_t h;
  std::memcpy(&h, handle.data(), sizeof(h));
  void* address = nullptr;
  hipError_t err = hipSetDevice(device);
  if (err == hipSuccess) err = hipIpcOpenMemHandle(&address, h, hipIpcMemLazyEnablePeerAccess);
  if (err != hipSuccess) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot open the IPC handle on device ", device, ": ", RuntimeMessage(err),
        "; the handle must come from a live allocation of another process on this host"));
  }
  void* base = nullptr;
  int64_t size = 0;
  err = AllocationRange(address, &base, &size);
  if (err != hipSuccess) {
    const std::string why = RuntimeMessage(err);
    if (hipIpcCloseMemHandle(address) != hipSuccess) (void)hipGetLastError();
    return absl::FailedPreconditionError(
        absl::StrCat("cannot find the size of the opened allocation: ", why));
  }
  Opened& opened = opened_[std::move(key)];
  opened.memory.address = address;
  opened.memory.bytes =
      static_cast<int64_t>(static_cast<char*>(base) + size - static_cast<char*>(address));
  opened.regions = 1;
  return opened.memory;
}

void GpuDeviceMemoryImporter::Close(void* address, int32_t device) {
  absl::MutexLock lock(&mu_);
  for (auto it = opened_.begin(); it != opened_.end(); ++it) {
    if (it->first.second != device || it->second.memory.address != address) continue;
    if (--it->second.regions > 0) return;
    opened_.erase(it);
    if (hipSetDevice(device) != hipSuccess || hipIpcCloseMemHandle(address) != hipSuccess) {
      (void)hipGetLastError();
    }
    return;
  }
}

}  // namespace conv1d::gpu
