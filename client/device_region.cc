#include "client/device_region.h"

#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "inference/grpc_predict_v2.grpc.pb.h"
#include "kernels/gpu_compat.h"

namespace conv1d {
namespace {

absl::Status RuntimeStatus(hipError_t err, absl::string_view what) {
  if (err == hipSuccess) return absl::OkStatus();
  (void)hipGetLastError();
  return absl::FailedPreconditionError(
      absl::StrCat(what, ": ", hipGetErrorString(err), " (error ", static_cast<int>(err), ")"));
}

absl::Status FromGrpc(const grpc::Status& s, absl::string_view what) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat(what, ": ", s.error_message()));
}

void AddMetadata(grpc::ClientContext* context,
                 const std::multimap<std::string, std::string>& metadata) {
  for (const auto& [key, value] : metadata) context->AddMetadata(key, value);
}

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceRegion>> DeviceRegion::Create(
    const DeviceRegionOptions& options) {
  if (options.byte_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("byte_size is ", options.byte_size, ", expected >= 1"));
  }
  if (options.device < 0) {
    return absl::InvalidArgumentError(absl::StrCat("device is ", options.device));
  }
  std::unique_ptr<DeviceRegion> region(new DeviceRegion());
  region->device_ = options.device;
  region->byte_size_ = options.byte_size;
  absl::Status st = RuntimeStatus(hipSetDevice(options.device),
                                  absl::StrCat("selecting device ", options.device));
  if (st.ok()) {
    st = RuntimeStatus(hipMalloc(&region->data_, static_cast<size_t>(options.byte_size)),
                       absl::StrCat("allocating ", options.byte_size, " bytes on device ",
                                    options.device));
  }
  hipIpcMemHandle_t handle;
  if (st.ok()) {
    st = RuntimeStatus(hipIpcGetMemHandle(&handle, region->data_), "exporting an IPC handle");
  }
  if (!st.ok()) return st;
  region->raw_handle_.assign(reinterpret_cast<const char*>(&handle), sizeof(handle));
  return region;
}

DeviceRegion::~DeviceRegion() {
  (void)Unregister();
  if (data_ != nullptr) {
    (void)hipSetDevice(device_);
    (void)hipFree(data_);
  }
}

absl::Status DeviceRegion::Write(int64_t offset, const void* src, int64_t bytes) {
  if (offset < 0 || bytes < 0 || offset > byte_size_ - bytes) {
    return absl::InvalidArgumentError(absl::StrCat(bytes, " bytes at offset ", offset,
                                                   " leave the region of ", byte_size_));
  }
  absl::Status st = RuntimeStatus(hipSetDevice(device_), "selecting the device");
  if (!st.ok()) return st;
  return RuntimeStatus(hipMemcpy(static_cast<char*>(data_) + offset, src,
                                 static_cast<size_t>(bytes), hipMemcpyHostToDevice),
                       "copying into the region");
}

absl::Status DeviceRegion::Read(int64_t offset, void* dst, int64_t bytes) const {
  if (offset < 0 || bytes < 0 || offset > byte_size_ - bytes) {
    return absl::InvalidArgumentError(absl::StrCat(bytes, " bytes at offset ", offset,
                                                   " leave the region of ", byte_size_));
  }
  absl::Status st = RuntimeStatus(hipSetDevice(device_), "selecting the device");
  if (!st.ok()) return st;
  return RuntimeStatus(hipMemcpy(dst, static_cast<const char*>(data_) + offset,
                                 static_cast<size_t>(bytes), hipMemcpyDeviceToHost),
                       "copying out of the region");
}

absl::Status DeviceRegion::Fill(int64_t offset, int value, int64_t bytes) {
  if (offset < 0 || bytes < 0 || offset > byte_size_ - bytes) {
    return absl::InvalidArgumentError(absl::StrCat(bytes, " bytes at offset ", offset,
                                                   " leave the region of ", byte_size_));
  }
  absl::Status st = RuntimeStatus(hipSetDevice(device_), "selecting the device");
  if (!st.ok()) return st;
  return RuntimeStatus(
      hipMemset(static_cast<char*>(data_) + offset, value, static_cast<size_t>(bytes)),
      "filling the region");
}

absl::Status DeviceRegion::Register(const std::shared_ptr<grpc::Channel>& channel,
                                    absl::string_view name,
                                    const std::multimap<std::string, std::string>& metadata) {
  if (!name_.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the region is already registered as \"", name_, "\""));
  }
  inference::CudaSharedMemoryRegisterRequest request;
  request.set_name(std::string(name));
  request.set_raw_handle(raw_handle_);
  request.set_device_id(device_);
  request.set_byte_size(static_cast<uint64_t>(byte_size_));
  inference::CudaSharedMemoryRegisterResponse response;
  grpc::ClientContext context;
  AddMetadata(&context, metadata);
  auto stub = inference::GRPCInferenceService::NewStub(channel);
  absl::Status st = FromGrpc(stub->CudaSharedMemoryRegister(&context, request, &response),
                             absl::StrCat("registering device region \"", name, "\""));
  if (!st.ok()) return st;
  channel_ = channel;
  name_ = std::string(name);
  return absl::OkStatus();
}

absl::Status DeviceRegion::Unregister(const std::multimap<std::string, std::string>& metadata) {
  if (name_.empty()) return absl::OkStatus();
  inference::CudaSharedMemoryUnregisterRequest request;
  request.set_name(name_);
  inference::CudaSharedMemoryUnregisterResponse response;
  grpc::ClientContext context;
  AddMetadata(&context, metadata);
  auto stub = inference::GRPCInferenceService::NewStub(channel_);
  absl::Status st = FromGrpc(stub->CudaSharedMemoryUnregister(&context, request, &response),
                             absl::StrCat("unregistering device region \"", name_, "\""));
  if (st.ok() || absl::IsNotFound(st)) {
    name_.clear();
    channel_.reset();
    return absl::OkStatus();
  }
  return st;
}

}  // namespace conv1d
