#include "server/frontend/oip_device_regions.h"

#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"

namespace conv1d {

absl::Status RegisterDeviceRegion(SharedMemoryRegistry* shm, absl::string_view backend,
                                  absl::string_view owner,
                                  const inference::CudaSharedMemoryRegisterRequest& request) {
  if (!shm->serves_device_regions()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "region \"", request.name(), "\": the ", backend,
        " backend cannot read or write device memory; register system shared memory "
        "instead, or serve from a GPU (--backend=gpu)"));
  }
  if (request.device_id() < 0 || request.device_id() > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(
        "region \"", request.name(), "\": device_id ", request.device_id(),
        " is not a device index"));
  }
  if (request.byte_size() > static_cast<uint64_t>(INT64_MAX)) {
    return absl::InvalidArgumentError(
        absl::StrCat("region \"", request.name(), "\": byte_size must fit in int64"));
  }
  return shm->RegisterDevice(request.name(), request.raw_handle(),
                             static_cast<int32_t>(request.device_id()),
                             static_cast<int64_t>(request.byte_size()), owner);
}

absl::Status DeviceRegionStatus(const SharedMemoryRegistry& shm, const RegionUser& user,
                                const inference::CudaSharedMemoryStatusRequest& request,
                                inference::CudaSharedMemoryStatusResponse* response) {
  absl::StatusOr<std::vector<SharedRegionInfo>> regions =
      shm.Status(request.name(), RegionType::kDevice, user);
  if (!regions.ok()) return regions.status();
  for (const SharedRegionInfo& info : *regions) {
    auto& out = (*response->mutable_regions())[info.name];
    out.set_name(info.name);
    out.set_device_id(static_cast<uint64_t>(info.device_id));
    out.set_byte_size(static_cast<uint64_t>(info.byte_size));
  }
  return absl::OkStatus();
}

}  // namespace conv1d
