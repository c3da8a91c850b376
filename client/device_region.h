// DeviceRegion: device memory this process allocates and shares with a
// conv1d-serve on the same host through a CUDA/HIP IPC handle, registered
// with the inference protocol's CudaSharedMemoryRegister (Triton's call and
// field names). Request tensors placed in it (a conv1d.v1 Tensor's
// shared_memory {region, offset}, or the inference protocol's
// shared_memory_region parameters) are read, and outputs written, by the
// server's kernels in place: no tensor byte crosses gRPC or the PCIe bus.
//
// Typical use (tests/gpu_e2e/device_region_e2e_test.cc):
//   auto region = DeviceRegion::Create({.device = 0, .byte_size = 64 << 20});
//   (*region)->Write(0, x.data(), x_bytes);
//   (*region)->Register(channel, "io");       // the server opens the handle
//   ... requests naming region "io" ...
//   (*region)->Read(y_offset, y.data(), y_bytes);
//   (*region)->Unregister(channel);           // also done by the destructor
//
// The handle cannot be opened by the process that made it, so the server
// must be another process (on the same host and device). Only in builds
// with a GPU toolchain (target conv1d_client_device_region).
//
// Thread-safety: Write, Read and the accessors may be called from several
// threads; Register and Unregister not concurrently with each other.
#ifndef CONV1D_CLIENT_DEVICE_REGION_H_
#define CONV1D_CLIENT_DEVICE_REGION_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/grpcpp.h"

namespace conv1d {

struct DeviceRegionOptions {
  // Runtime device index the memory is allocated on (and named to the
  // server as device_id; both processes must see the same device under it).
  int device = 0;
  // Bytes of device memory; >= 1.
  int64_t byte_size = 0;
};

class DeviceRegion {
 public:
  // INVALID_ARGUMENT for a bad option; FAILED_PRECONDITION when the device
  // or the allocation is not available.
  static absl::StatusOr<std::unique_ptr<DeviceRegion>> Create(
      const DeviceRegionOptions& options);
  // Unregisters (best effort) and frees the memory.
  ~DeviceRegion();

  DeviceRegion(const DeviceRegion&) = delete;
  DeviceRegion& operator=(const DeviceRegion&) = delete;

  int device() const { return device_; }
  int64_t byte_size() const { return byte_size_; }
  void* device_data() const { return data_; }
  // The IPC handle's bytes (CudaSharedMemoryRegisterRequest.raw_handle).
  const std::string& raw_handle() const { return raw_handle_; }

  // Copies host bytes into / out of the region. INVALID_ARGUMENT when the
  // range leaves the region.
  absl::Status Write(int64_t offset, const void* src, int64_t bytes);
  absl::Status Read(int64_t offset, void* dst, int64_t bytes) const;
  // Sets `bytes` bytes at `offset` to `value`.
  absl::Status Fill(int64_t offset, int value, int64_t bytes);

  // CudaSharedMemoryRegister of the whole region under `name` on the
  // inference service at `channel`; the server's status otherwise.
  // `metadata` is added to the call (e.g. {"authorization", "Bearer ..."}).
  absl::Status Register(const std::shared_ptr<grpc::Channel>& channel, absl::string_view name,
                        const std::multimap<std::string, std::string>& metadata = {});
  // CudaSharedMemoryUnregister of the registered name; OK when not
  // registered.
  absl::Status Unregister(const std::multimap<std::string, std::string>& metadata = {});
  // The name it is registered under; empty when it is not.
  const std::string& name() const { return name_; }

 private:
  DeviceRegion() = default;

  int device_ = 0;
  int64_t byte_size_ = 0;
  void* data_ = nullptr;
  std::string raw_handle_;
  std::shared_ptr<grpc::Channel> channel_;
  std::string name_;
};

}  // namespace conv1d

#endif  // CONV1D_CLIENT_DEVICE_REGION_H_
