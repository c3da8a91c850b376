// Memory regions that conv1d_load shares with the server, so that request
// tensors travel as region references instead of bytes in gRPC messages
// (--memory). A region is one kind of memory (`system`: a POSIX
// shared-memory object) behind a small interface: create it, copy bytes in
// and out, register it with the server through the inference protocol's
// register RPC of its kind, unregister it. Another kind (device memory
// shared through CUDA/HIP IPC) is one more implementation of TensorRegion
// and one more case in CreateRegion.
//
// Both protocols name regions the same way: by the name they were
// registered under (inference protocol: the shared_memory_region parameter;
// conv1d.v1: Tensor.shared_memory / output_shared_memory), and conv1d.v1
// uses the regions the inference protocol registered.
//
// Used by the load transports (load_transport.h). Thread-safety: Write and
// Read of disjoint ranges may run concurrently; Register/Unregister are
// called once each, from one thread.
#ifndef CONV1D_CLIENT_LOAD_REGION_H_
#define CONV1D_CLIENT_LOAD_REGION_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/grpcpp.h"

namespace conv1d {

class TensorRegion {
 public:
  virtual ~TensorRegion() = default;
  // The name the server knows the region by.
  virtual const std::string& name() const = 0;
  virtual int64_t bytes() const = 0;
  virtual const char* kind() const = 0;  // "system" or "device"
  // Copies in or out; INVALID_ARGUMENT when the range is outside.
  virtual absl::Status Write(int64_t offset, const void* src, int64_t n) = 0;
  virtual absl::Status Read(int64_t offset, void* dst, int64_t n) const = 0;
  // Registers / unregisters the whole region with the server over
  // `channel`, sending `authorization` ("Bearer ..." or empty).
  virtual absl::Status Register(const std::shared_ptr<grpc::Channel>& channel,
                                const std::string& authorization) = 0;
  virtual absl::Status Unregister(const std::shared_ptr<grpc::Channel>& channel,
                                  const std::string& authorization) = 0;
};

// The memory kinds CreateRegion makes ("system"; "device" in builds with a
// GPU toolchain: device memory of device 0 shared through an IPC handle,
// region_device.cc).
bool IsRegionKind(absl::string_view kind);

// A new region of `bytes` bytes of kind `kind` ("system": a POSIX
// shared-memory object named /<name>, removed when the region is
// destroyed). INVALID_ARGUMENT for an unknown kind; the OS's error (e.g.
// /dev/shm full) otherwise.
absl::StatusOr<std::unique_ptr<TensorRegion>> CreateRegion(absl::string_view kind,
                                                           const std::string& name,
                                                           int64_t bytes);

}  // namespace conv1d

#endif  // CONV1D_CLIENT_LOAD_REGION_H_
