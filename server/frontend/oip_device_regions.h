// The inference protocol's CUDA shared-memory calls (Triton's
// CudaSharedMemoryRegister / Status / Unregister) on the server's
// SharedMemoryRegistry: a co-located process exports device memory as an
// IPC handle (cudaIpcMemHandle_t bytes; on ROCm hipIpcMemHandle_t), the
// backend opens it once on `device_id`, and request tensors placed there
// are read and written in place by the kernels (see shm_registry.h).
//
// Used by OipService (oip_service.cc), which wraps each in its Inline call
// (authentication, access log, status mapping).
// Thread-safety: as the registry's (every function is thread-safe).
#ifndef CONV1D_SERVER_FRONTEND_OIP_DEVICE_REGIONS_H_
#define CONV1D_SERVER_FRONTEND_OIP_DEVICE_REGIONS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "inference/grpc_predict_v2.pb.h"
#include "server/core/shm_registry.h"

namespace conv1d {

// FAILED_PRECONDITION naming `backend` when it cannot use device memory;
// INVALID_ARGUMENT for a negative device id or a size past int64; the
// registry's errors otherwise. The region belongs to `owner`.
absl::Status RegisterDeviceRegion(SharedMemoryRegistry* shm, absl::string_view backend,
                                  absl::string_view owner,
                                  const inference::CudaSharedMemoryRegisterRequest& request);

// Device regions that `user` may reach, by name (all when the name is
// empty); NOT_FOUND for a name that is not a registered device region
// `user` may reach.
absl::Status DeviceRegionStatus(const SharedMemoryRegistry& shm, const RegionUser& user,
                                const inference::CudaSharedMemoryStatusRequest& request,
                                inference::CudaSharedMemoryStatusResponse* response);

}  // namespace conv1d

#endif  // CONV1D_SERVER_FRONTEND_OIP_DEVICE_REGIONS_H_
