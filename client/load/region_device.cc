// The `device` memory kind of conv1d_load (--memory=device): a TensorRegion
// over a DeviceRegion (client/device_region.h), device memory of device 0
// shared with a server on the same host through an IPC handle and
// registered with CudaSharedMemoryRegister. Request inputs are written into
// it once; outputs are read back only for the answers that are verified, so
// no tensor byte of an unverified request crosses gRPC or the bus on the
// client's side. Built only with a GPU toolchain.
#include <map>
#include <memory>
#include <string>

#include "client/device_region.h"
#include "client/load/region.h"

namespace conv1d {
namespace {

class DeviceTensorRegion final : public TensorRegion {
 public:
  DeviceTensorRegion(std::unique_ptr<DeviceRegion> region, std::string name)
      : region_(std::move(region)), name_(std::move(name)) {}

  const std::string& name() const override { return name_; }
  int64_t bytes() const override { return region_->byte_size(); }
  const char* kind() const override { return "device"; }
  absl::Status Write(int64_t offset, const void* src, int64_t n) override {
    return region_->Write(offset, src, n);
  }
  absl::Status Read(int64_t offset, void* dst, int64_t n) const override {
    return region_->Read(offset, dst, n);
  }
  absl::Status Register(const std::shared_ptr<grpc::Channel>& channel,
                        const std::string& authorization) override {
    return region_->Register(channel, name_, Metadata(authorization));
  }
  absl::Status Unregister(const std::shared_ptr<grpc::Channel>&,
                          const std::string& authorization) override {
    return region_->Unregister(Metadata(authorization));
  }

 private:
  static std::multimap<std::string, std::string> Metadata(const std::string& authorization) {
    std::multimap<std::string, std::string> m;
    if (!authorization.empty()) m.emplace("authorization", authorization);
    return m;
  }
  std::unique_ptr<DeviceRegion> region_;
  const std::string name_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<TensorRegion>> CreateDeviceTensorRegion(const std::string& name,
                                                                       int64_t bytes) {
  DeviceRegionOptions o;
  o.device = 0;
  o.byte_size = bytes;
  absl::StatusOr<std::unique_ptr<DeviceRegion>> r = DeviceRegion::Create(o);
  if (!r.ok()) return r.status();
  return std::unique_ptr<TensorRegion>(new DeviceTensorRegion(*std::move(r), name));
}

}  // namespace conv1d
