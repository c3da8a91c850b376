#include "client/load/region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "inference/grpc_predict_v2.grpc.pb.h"

namespace conv1d {
namespace {

absl::Status FromGrpc(const grpc::Status& s, absl::string_view what) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat(what, ": ", s.error_message()));
}

void Prepare(grpc::ClientContext* ctx, const std::string& authorization) {
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  if (!authorization.empty()) ctx->AddMetadata("authorization", authorization);
}

// A POSIX shared-memory object mapped into this process.
class SystemRegion final : public TensorRegion {
 public:
  static absl::StatusOr<std::unique_ptr<TensorRegion>> Create(const std::string& name,
                                                              int64_t bytes) {
    const std::string key = absl::StrCat("/", name);
    const int fd = shm_open(key.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) {
      return absl::InternalError(absl::StrCat("shm_open ", key, ": ", std::strerror(errno)));
    }
    void* data = MAP_FAILED;
    if (ftruncate(fd, bytes) == 0) {
      data = mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    }
    const int err = errno;
    close(fd);
    if (data == MAP_FAILED) {
      shm_unlink(key.c_str());
      return absl::ResourceExhaustedError(absl::StrCat(
          "shared memory ", key, " of ", bytes, " bytes: ", std::strerror(err)));
    }
    return std::unique_ptr<TensorRegion>(new SystemRegion(name, key, data, bytes));
  }

  ~SystemRegion() override {
    munmap(data_, static_cast<size_t>(bytes_));
    shm_unlink(key_.c_str());
  }

  const std::string& name() const override { return name_; }
  int64_t bytes() const override { return bytes_; }
  const char* kind() const override { return "system"; }

  absl::Status Write(int64_t offset, const void* src, int64_t n) override {
    if (absl::Status s = Check(offset, n); !s.ok()) return s;
    std::memcpy(static_cast<char*>(data_) + offset, src, static_cast<size_t>(n));
    return absl::OkStatus();
  }
  absl::Status Read(int64_t offset, void* dst, int64_t n) const override {
    if (absl::Status s = Check(offset, n); !s.ok()) return s;
    std::memcpy(dst, static_cast<const char*>(data_) + offset, static_cast<size_t>(n));
    return absl::OkStatus();
  }

  absl::Status Register(const std::shared_ptr<grpc::Channel>& channel,
                        const std::string& authorization) override {
    auto stub = inference::GRPCInferenceService::NewStub(channel);
    inference::SystemSharedMemoryRegisterRequest req;
    req.set_name(name_);
    req.set_key(key_);
    req.set_offset(0);
    req.set_byte_size(static_cast<uint64_t>(bytes_));
    inference::SystemSharedMemoryRegisterResponse resp;
    grpc::ClientContext ctx;
    Prepare(&ctx, authorization);
    return FromGrpc(stub->SystemSharedMemoryRegister(&ctx, req, &resp),
                    absl::StrCat("registering region ", name_));
  }
  absl::Status Unregister(const std::shared_ptr<grpc::Channel>& channel,
                          const std::string& authorization) override {
    auto stub = inference::GRPCInferenceService::NewStub(channel);
    inference::SystemSharedMemoryUnregisterRequest req;
    req.set_name(name_);
    inference::SystemSharedMemoryUnregisterResponse resp;
    grpc::ClientContext ctx;
    Prepare(&ctx, authorization);
    return FromGrpc(stub->SystemSharedMemoryUnregister(&ctx, req, &resp),
                    absl::StrCat("unregistering region ", name_));
  }

 private:
  SystemRegion(std::string name, std::string key, void* data, int64_t bytes)
      : name_(std::move(name)), key_(std::move(key)), data_(data), bytes_(bytes) {}

  absl::Status Check(int64_t offset, int64_t n) const {
    if (offset < 0 || n < 0 || offset > bytes_ - n) {
      return absl::InvalidArgumentError(absl::StrCat("region ", name_, ": range ", offset,
                                                     "+", n, " outside its ", bytes_,
                                                     " bytes"));
    }
    return absl::OkStatus();
  }

  const std::string name_;
  const std::string key_;
  void* const data_;
  const int64_t bytes_;
};

}  // namespace

#ifdef CONV1D_LOAD_DEVICE_REGIONS
// region_device.cc (GPU builds).
absl::StatusOr<std::unique_ptr<TensorRegion>> CreateDeviceTensorRegion(const std::string& name,
                                                                       int64_t bytes);
#endif

bool IsRegionKind(absl::string_view kind) {
#ifdef CONV1D_LOAD_DEVICE_REGIONS
  if (kind == "device") return true;
#endif
  return kind == "system";
}

absl::StatusOr<std::unique_ptr<TensorRegion>> CreateRegion(absl::string_view kind,
                                                           const std::string& name,
                                                           int64_t bytes) {
  if (bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("region ", name, ": ", bytes, " bytes"));
  }
  if (kind == "system") return SystemRegion::Create(name, bytes);
#ifdef CONV1D_LOAD_DEVICE_REGIONS
  if (kind == "device") return CreateDeviceTensorRegion(name, bytes);
  return absl::InvalidArgumentError(
      absl::StrCat("--memory: '", kind, "' is not a memory kind (grpc, system, device)"));
#else
  return absl::InvalidArgumentError(absl::StrCat(
      "--memory: '", kind, "' is not a memory kind (grpc, system; device needs a build of "
      "conv1d_load with a GPU toolchain)"));
#endif
}

}  // namespace conv1d
