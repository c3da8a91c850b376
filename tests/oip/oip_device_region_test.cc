// Device regions through the frontends in-process, without a GPU: a backend
// whose "device memory" is host memory (its importer hands out host bytes
// for a handle, its RunBatch checks that region tensors arrive as
// kSharedDevice views on the region's device and computes them with the CPU
// backend) shows that CudaSharedMemoryRegister / Status / Unregister and
// the conv1d.v1 and inference-protocol region references reach the backend
// as device placements, with values against the CPU reference. And the CPU
// backend refuses device regions, naming itself.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "inference/grpc_predict_v2.grpc.pb.h"
#include "server/backends/cpu/cpu_backend.h"
#include "tests/common/test_seed.h"
#include "tests/e2e/e2e_util.h"

namespace conv1d::e2e {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kHandleBytes = 64;
constexpr int64_t kRegionBytes = 1 << 20;

// One "exported allocation" of host memory; its handle is "mem" padded.
class HostAsDeviceImporter final : public DeviceMemoryImporter {
 public:
  HostAsDeviceImporter() : memory_(kRegionBytes) {}
  static std::string Handle() {
    std::string h(kHandleBytes, '\0');
    std::memcpy(h.data(), "mem", 3);
    return h;
  }
  char* memory() { return memory_.data(); }

  int64_t handle_bytes() const override { return kHandleBytes; }
  absl::StatusOr<ImportedDeviceMemory> Open(absl::string_view handle,
                                            int32_t device) override {
    if (device != 3) return absl::InvalidArgumentError("device_id: only device 3 here");
    if (handle != Handle()) return absl::FailedPreconditionError("unknown handle");
    absl::MutexLock lock(&mu_);
    ++open_;
    return ImportedDeviceMemory{memory_.data(), kRegionBytes};
  }
  void Close(void*, int32_t) override {
    absl::MutexLock lock(&mu_);
    --open_;
  }
  int open() {
    absl::MutexLock lock(&mu_);
    return open_;
  }

 private:
  std::vector<char> memory_;
  absl::Mutex mu_;
  int open_ ABSL_GUARDED_BY(mu_) = 0;
};

// The CPU backend's compute on views whose placement must say device 3.
class HostAsDeviceBackend final : public Backend {
 public:
  HostAsDeviceBackend()
      : cpu_(*CpuBackend::Create(CpuBackendOptions{.threads = 1})),
        importer_(std::make_shared<HostAsDeviceImporter>()) {}
  const char* name() const override { return "host-as-device"; }
  std::vector<std::string> devices() const override { return {"3: host"}; }
  int num_lanes() const override { return 1; }
  std::shared_ptr<DeviceMemoryImporter> device_memory_importer() const override {
    return importer_;
  }
  absl::Status RunBatch(int lane, const BatchKey& key, absl::Span<ConvSegment* const> segments,
                        BatchStats* stats) override {
    for (ConvSegment* s : segments) {
      for (int i = 0; i < kNumRoles; ++i) {
        const Role role = RoleAt(i);
        const Placement& where = s->where(role);
        const void* data = s->data(role);
        if (data == nullptr) continue;
        const char* p = static_cast<const char*>(data);
        const bool in_region =
            p >= importer_->memory() && p < importer_->memory() + kRegionBytes;
        if (in_region != (where.kind == MemoryKind::kSharedDevice) ||
            (in_region && where.device != 3)) {
          return absl::InternalError(absl::StrCat(RoleName(role), " is ",
                                                  MemoryKindName(where.kind), " on device ",
                                                  where.device));
        }
        if (in_region) {
          absl::MutexLock lock(&mu_);
          ++device_tensors_;
        }
      }
    }
    return cpu_->RunBatch(lane, key, segments, stats);
  }
  HostAsDeviceImporter* importer() const { return importer_.get(); }
  int device_tensors() {
    absl::MutexLock lock(&mu_);
    return device_tensors_;
  }

 private:
  std::unique_ptr<CpuBackend> cpu_;
  std::shared_ptr<HostAsDeviceImporter> importer_;
  absl::Mutex mu_;
  int device_tensors_ ABSL_GUARDED_BY(mu_) = 0;
};

class OipDeviceRegionTest : public ::testing::Test {
 protected:
  void Start(std::unique_ptr<Backend> backend) {
    ServerOptions options;
    if (backend != nullptr) {
      options.backend_instance = std::move(backend);
    } else {
      options.backend.name = "cpu";
    }
    ASSERT_NO_FATAL_FAILURE(StartTestServer(std::move(options), &ts_));
    oip_ = inference::GRPCInferenceService::NewStub(ts_.channel);
  }
  grpc::Status Register(const std::string& name, const std::string& handle, int64_t device,
                        uint64_t bytes) {
    grpc::ClientContext ctx;
    inference::CudaSharedMemoryRegisterRequest req;
    req.set_name(name);
    req.set_raw_handle(handle);
    req.set_device_id(device);
    req.set_byte_size(bytes);
    inference::CudaSharedMemoryRegisterResponse resp;
    return oip_->CudaSharedMemoryRegister(&ctx, req, &resp);
  }
  grpc::Status Unregister(const std::string& name) {
    grpc::ClientContext ctx;
    inference::CudaSharedMemoryUnregisterRequest req;
    req.set_name(name);
    inference::CudaSharedMemoryUnregisterResponse resp;
    return oip_->CudaSharedMemoryUnregister(&ctx, req, &resp);
  }
  inference::CudaSharedMemoryStatusResponse Status() {
    grpc::ClientContext ctx;
    inference::CudaSharedMemoryStatusResponse resp;
    EXPECT_TRUE(oip_->CudaSharedMemoryStatus(&ctx, {}, &resp).ok());
    return resp;
  }
  std::vector<std::string> Extensions() {
    grpc::ClientContext ctx;
    inference::ServerMetadataResponse resp;
    EXPECT_TRUE(oip_->ServerMetadata(&ctx, {}, &resp).ok());
    return {resp.extensions().begin(), resp.extensions().end()};
  }

  TestServer ts_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> oip_;
};

TEST_F(OipDeviceRegionTest, TheCpuBackendRefusesDeviceRegionsNamingItself) {
  ASSERT_NO_FATAL_FAILURE(Start(nullptr));
  const grpc::Status st = Register("g", HostAsDeviceImporter::Handle(), 0, 64);
  EXPECT_EQ(st.error_code(), grpc::FAILED_PRECONDITION) << st.error_message();
  EXPECT_THAT(st.error_message(),
              HasSubstr("region \"g\": the cpu backend cannot read or write device memory"));
  EXPECT_TRUE(Status().regions().empty());
  const grpc::Status un = Unregister("g");
  EXPECT_EQ(un.error_code(), grpc::NOT_FOUND) << un.error_message();
  EXPECT_TRUE(Unregister("").ok());
  EXPECT_THAT(Extensions(), ::testing::Not(::testing::Contains("cuda_shared_memory")));
}

TEST_F(OipDeviceRegionTest, RegionTensorsReachTheBackendAsDeviceMemory) {
  auto owned = std::make_unique<HostAsDeviceBackend>();
  HostAsDeviceBackend* backend = owned.get();
  ASSERT_NO_FATAL_FAILURE(Start(std::move(owned)));
  EXPECT_THAT(Extensions(), ::testing::Contains("cuda_shared_memory"));

  // Registration errors name the region and the reason.
  grpc::Status st = Register("d", HostAsDeviceImporter::Handle(), 0, 64);
  EXPECT_EQ(st.error_code(), grpc::INVALID_ARGUMENT) << st.error_message();
  EXPECT_THAT(st.error_message(), HasSubstr("region \"d\": device_id"));
  st = Register("d", "short", 3, 64);
  EXPECT_EQ(st.error_code(), grpc::INVALID_ARGUMENT) << st.error_message();
  st = Register("d", HostAsDeviceImporter::Handle(), 3, kRegionBytes + 1);
  EXPECT_EQ(st.error_code(), grpc::INVALID_ARGUMENT) << st.error_message();
  EXPECT_THAT(st.error_message(), HasSubstr("more than the"));
  st = Register("d", HostAsDeviceImporter::Handle(), -1, 64);
  EXPECT_EQ(st.error_code(), grpc::INVALID_ARGUMENT) << st.error_message();
  EXPECT_EQ(backend->importer()->open(), 0);

  ASSERT_TRUE(Register("d", HostAsDeviceImporter::Handle(), 3, kRegionBytes).ok());
  EXPECT_EQ(backend->importer()->open(), 1);
  const inference::CudaSharedMemoryStatusResponse status = Status();
  ASSERT_EQ(status.regions().count("d"), 1u);
  EXPECT_EQ(status.regions().at("d").device_id(), 3u);
  EXPECT_EQ(status.regions().at("d").byte_size(), static_cast<uint64_t>(kRegionBytes));

  // conv1d.v1: x and the weights in the region, y written there.
  CONV1D_TEST_SEED_SCOPE(seed, 23);
  Rng rng(seed);
  Case c;
  c.bias = true;
  c.act = Activation::kSiLU;
  const Inputs in = MakeInputs(c, &rng);
  char* mem = backend->importer()->memory();
  const int64_t x_bytes = static_cast<int64_t>(in.x.data().size());
  const int64_t w_bytes = static_cast<int64_t>(in.weight.data().size());
  std::memcpy(mem, in.x.data().data(), x_bytes);
  std::memcpy(mem + 4096, in.weight.data().data(), w_bytes);
  v1::ForwardRequest req = MakeForward(c, in);
  req.mutable_x()->clear_data();
  req.mutable_x()->mutable_shared_memory()->set_region("d");
  auto* weight = req.mutable_inline_weights()->mutable_weight();
  weight->clear_data();
  weight->mutable_shared_memory()->set_region("d");
  weight->mutable_shared_memory()->set_offset(4096);
  (*req.mutable_output_shared_memory())["y"].set_region("d");
  (*req.mutable_output_shared_memory())["y"].set_offset(8192);
  v1::ForwardResponse resp;
  {
    grpc::ClientContext ctx;
    st = ts_.stub->Forward(&ctx, req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  EXPECT_EQ(backend->device_tensors(), 3);
  EXPECT_EQ(resp.y().shared_memory().region(), "d");
  ASSERT_TRUE(resp.y().data().empty());
  resp.mutable_y()->set_data(mem + 8192, x_bytes);
  EXPECT_EQ(CheckForward(c, in, resp), "");

  // The inference protocol: the same region by Triton's parameters.
  inference::ModelInferRequest infer;
  infer.set_model_name("conv1d_forward");
  for (auto [name, t, at] : {std::tuple<const char*, const v1::Tensor*, int64_t>{
                                 "x", &in.x, 0},
                             {"weight", &in.weight, 4096}}) {
    auto* input = infer.add_inputs();
    input->set_name(name);
    input->set_datatype("FP32");
    input->mutable_shape()->Assign(t->shape().begin(), t->shape().end());
    auto& p = *input->mutable_parameters();
    p["shared_memory_region"].set_string_param("d");
    p["shared_memory_offset"].set_int64_param(at);
    p["shared_memory_byte_size"].set_int64_param(static_cast<int64_t>(t->data().size()));
  }
  auto* bias = infer.add_inputs();
  bias->set_name("bias");
  bias->set_datatype("FP32");
  bias->add_shape(c.dim);
  infer.add_raw_input_contents();
  infer.add_raw_input_contents();
  infer.add_raw_input_contents(in.bias.data());
  (*infer.mutable_parameters())["activation"].set_string_param("silu");
  auto* out = infer.add_outputs();
  out->set_name("y");
  (*out->mutable_parameters())["shared_memory_region"].set_string_param("d");
  (*out->mutable_parameters())["shared_memory_offset"].set_int64_param(65536);
  (*out->mutable_parameters())["shared_memory_byte_size"].set_int64_param(x_bytes);
  std::memset(mem + 65536, 0x7f, x_bytes);
  {
    grpc::ClientContext ctx;
    inference::ModelInferResponse r;
    st = oip_->ModelInfer(&ctx, infer, &r);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  EXPECT_EQ(backend->device_tensors(), 6);
  resp.mutable_y()->set_data(mem + 65536, x_bytes);
  EXPECT_EQ(CheckForward(c, in, resp), "");

  // Bounds against the registered size; unregistered names; unregister.
  {
    v1::ForwardRequest bad = req;
    bad.mutable_x()->mutable_shared_memory()->set_offset(kRegionBytes - 8);
    grpc::ClientContext ctx;
    st = ts_.stub->Forward(&ctx, bad, &resp);
    EXPECT_EQ(st.error_code(), grpc::INVALID_ARGUMENT) << st.error_message();
    EXPECT_THAT(st.error_message(), HasSubstr("region \"d\""));
  }
  EXPECT_EQ(Unregister("d").error_code(), grpc::OK);
  EXPECT_EQ(backend->importer()->open(), 0);
  {
    grpc::ClientContext ctx;
    st = ts_.stub->Forward(&ctx, req, &resp);
    EXPECT_EQ(st.error_code(), grpc::NOT_FOUND) << st.error_message();
  }
  EXPECT_TRUE(Status().regions().empty());
}

}  // namespace
}  // namespace conv1d::e2e
