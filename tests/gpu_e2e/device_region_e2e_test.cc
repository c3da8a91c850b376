// Device regions against the real conv1d_server on the GPU backend, driven
// from this separate process (an IPC handle cannot be opened by the process
// that made it): this process allocates device memory (DeviceRegion),
// registers it with CudaSharedMemoryRegister, and runs random forward,
// backward and update requests of every dtype pair, layout and width whose
// inputs, inline weights and outputs all live in it; every output is read
// back from device memory and compared with the CPU reference. Also the
// inference protocol's ModelInfer with region parameters, the status and
// unregister calls, and the errors (bounds, unregistered names, bad
// handles, sizes past the allocation, unknown devices).
// Skips itself where no GPU is visible. Seeds: CONV1D_TEST_SEED.
#include <atomic>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/test_seed.h"
#include "tests/gpu_e2e/gpu_e2e_util.h"

namespace conv1d::e2e {
namespace {

using ::testing::HasSubstr;

class DeviceRegionE2E : public GpuServerTest {};

TEST_F(DeviceRegionE2E, RandomRequestsOfEveryOpMatchTheCpu) {
  CONV1D_TEST_SEED_SCOPE(seed, 2026);
  Rng rng(seed);
  for (Op op : {Op::kForward, Op::kBackward, Op::kUpdate}) {
    for (int i = 0; i < 12; ++i) {
      Case c = RandomCase(op, &rng);
      EXPECT_EQ(RunInDeviceMemory(stub_.get(), region_.get(), c, &rng), "");
    }
  }
}

TEST_F(DeviceRegionE2E, LargeForwardAndUpdateInPlace) {
  CONV1D_TEST_SEED_SCOPE(seed, 7);
  Rng rng(seed);
  Case fwd;
  fwd.x_dtype = fwd.w_dtype = DType::kBF16;
  fwd.batch = 4;
  fwd.dim = 512;
  fwd.seqlen = 4096;  // 16 MiB of bf16 x, the same of y
  fwd.bias = true;
  fwd.act = Activation::kSiLU;
  fwd.initial_states = fwd.final_states = true;
  EXPECT_EQ(RunInDeviceMemory(stub_.get(), region_.get(), fwd, &rng), "");
  Case step;
  step.op = Op::kUpdate;
  step.batch = 64;
  step.dim = 1024;
  step.seqlen = 1;
  step.state_len = 3;
  EXPECT_EQ(RunInDeviceMemory(stub_.get(), region_.get(), step, &rng), "");
}

TEST_F(DeviceRegionE2E, StatusAndMetadataListTheRegion) {
  grpc::ClientContext ctx;
  inference::CudaSharedMemoryStatusRequest q;
  inference::CudaSharedMemoryStatusResponse r;
  ASSERT_TRUE(oip_->CudaSharedMemoryStatus(&ctx, q, &r).ok());
  ASSERT_EQ(r.regions().count("dev"), 1u);
  EXPECT_EQ(r.regions().at("dev").byte_size(), static_cast<uint64_t>(kRegionBytes));
  EXPECT_EQ(r.regions().at("dev").device_id(), 0u);
  grpc::ClientContext sys_ctx;
  inference::SystemSharedMemoryStatusResponse sys;
  ASSERT_TRUE(oip_->SystemSharedMemoryStatus(&sys_ctx, {}, &sys).ok());
  EXPECT_EQ(sys.regions().count("dev"), 0u);
  grpc::ClientContext meta_ctx;
  inference::ServerMetadataResponse meta;
  ASSERT_TRUE(oip_->ServerMetadata(&meta_ctx, {}, &meta).ok());
  EXPECT_THAT(meta.extensions(), ::testing::Contains("cuda_shared_memory"));
}

TEST_F(DeviceRegionE2E, ErrorsNameTheRegionAndNothingBreaks) {
  CONV1D_TEST_SEED_SCOPE(seed, 11);
  Rng rng(seed);
  Case c;
  c.dim = 16;
  c.seqlen = 64;
  const Inputs in = MakeInputs(c, &rng);
  v1::ForwardRequest q = MakeForward(c, in);
  RegionLayout layout(region_.get(), "dev");
  layout.PlaceInputs(&q);
  {
    // Past the region's end.
    v1::ForwardRequest bad = q;
    bad.mutable_x()->mutable_shared_memory()->set_offset(kRegionBytes - 100);
    grpc::ClientContext ctx;
    v1::ForwardResponse r;
    const grpc::Status st = stub_->Forward(&ctx, bad, &r);
    EXPECT_EQ(st.error_code(), grpc::INVALID_ARGUMENT) << st.error_message();
    EXPECT_THAT(st.error_message(), HasSubstr("region \"dev\""));
  }
  {
    v1::ForwardRequest bad = q;
    bad.mutable_x()->mutable_shared_memory()->set_region("nope");
    grpc::ClientContext ctx;
    v1::ForwardResponse r;
    const grpc::Status st = stub_->Forward(&ctx, bad, &r);
    EXPECT_EQ(st.error_code(), grpc::NOT_FOUND) << st.error_message();
  }
  auto cuda_register = [&](const std::string& name, const std::string& handle, int64_t device,
                           uint64_t bytes) {
    grpc::ClientContext ctx;
    inference::CudaSharedMemoryRegisterRequest req;
    req.set_name(name);
    req.set_raw_handle(handle);
    req.set_device_id(device);
    req.set_byte_size(bytes);
    inference::CudaSharedMemoryRegisterResponse resp;
    return oip_->CudaSharedMemoryRegister(&ctx, req, &resp);
  };
  grpc::Status st = cuda_register("junk", std::string(region_->raw_handle().size(), 'x'), 0, 64);
  EXPECT_EQ(st.error_code(), grpc::FAILED_PRECONDITION) << st.error_message();
  EXPECT_THAT(st.error_message(), HasSubstr("region \"junk\": cannot open the IPC handle"));
  st = cuda_register("big", region_->raw_handle(), 0, kRegionBytes * 4);
  EXPECT_EQ(st.error_code(), grpc::INVALID_ARGUMENT) << st.error_message();
  EXPECT_THAT(st.error_message(), HasSubstr("more than the"));
  st = cuda_register("far", region_->raw_handle(), 9, 64);
  EXPECT_EQ(st.error_code(), grpc::INVALID_ARGUMENT) << st.error_message();
  EXPECT_THAT(st.error_message(), HasSubstr("device_id 9"));
  st = cuda_register("short", "abc", 0, 64);
  EXPECT_EQ(st.error_code(), grpc::INVALID_ARGUMENT) << st.error_message();
  st = cuda_register("dev", region_->raw_handle(), 0, 64);
  EXPECT_EQ(st.error_code(), grpc::ALREADY_EXISTS) << st.error_message();

  // A second registration of the same memory under another name, used and
  // released: the server is still healthy and the first still serves.
  ASSERT_TRUE(cuda_register("again", region_->raw_handle(), 0, 1 << 20).ok());
  v1::ForwardRequest again = q;
  again.mutable_x()->mutable_shared_memory()->set_region("again");
  {
    grpc::ClientContext ctx;
    v1::ForwardResponse r;
    st = stub_->Forward(&ctx, again, &r);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(CheckForward(c, in, r), "");
  }
  grpc::ClientContext un_ctx;
  inference::CudaSharedMemoryUnregisterRequest un;
  un.set_name("again");
  inference::CudaSharedMemoryUnregisterResponse un_resp;
  ASSERT_TRUE(oip_->CudaSharedMemoryUnregister(&un_ctx, un, &un_resp).ok());
  {
    grpc::ClientContext ctx;
    v1::ForwardResponse r;
    st = stub_->Forward(&ctx, again, &r);
    EXPECT_EQ(st.error_code(), grpc::NOT_FOUND) << st.error_message();
  }
  EXPECT_EQ(RunInDeviceMemory(stub_.get(), region_.get(), c, &rng), "");
}

// The inference protocol's ModelInfer with Triton's region parameters.
TEST_F(DeviceRegionE2E, InferenceProtocolReadsAndWritesTheRegion) {
  CONV1D_TEST_SEED_SCOPE(seed, 5);
  Rng rng(seed);
  Case c;
  c.batch = 2;
  c.dim = 64;
  c.seqlen = 300;
  c.bias = true;
  const Inputs in = MakeInputs(c, &rng);
  RegionLayout layout(region_.get(), "dev");
  inference::ModelInferRequest q;
  q.set_model_name("conv1d_forward");
  auto add_input = [&](const std::string& name, const v1::Tensor& t) {
    auto* input = q.add_inputs();
    input->set_name(name);
    input->set_datatype("FP32");
    for (int64_t s : t.shape()) input->add_shape(s);
    const int64_t at = layout.Reserve(static_cast<int64_t>(t.data().size()));
    ASSERT_TRUE(region_->Write(at, t.data().data(), t.data().size()).ok());
    auto& p = *input->mutable_parameters();
    p["shared_memory_region"].set_string_param("dev");
    p["shared_memory_offset"].set_int64_param(at);
    p["shared_memory_byte_size"].set_int64_param(static_cast<int64_t>(t.data().size()));
  };
  add_input("x", in.x);
  add_input("weight", in.weight);
  add_input("bias", in.bias);
  const int64_t y_bytes = c.batch * c.dim * c.seqlen * 4;
  const int64_t y_at = layout.Reserve(y_bytes);
  auto* out = q.add_outputs();
  out->set_name("y");
  (*out->mutable_parameters())["shared_memory_region"].set_string_param("dev");
  (*out->mutable_parameters())["shared_memory_offset"].set_int64_param(y_at);
  (*out->mutable_parameters())["shared_memory_byte_size"].set_int64_param(y_bytes);
  grpc::ClientContext ctx;
  inference::ModelInferResponse r;
  const grpc::Status st = oip_->ModelInfer(&ctx, q, &r);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(r.raw_output_contents_size() == 0 ||
                r.raw_output_contents(0).empty(), true);
  v1::ForwardResponse as_v1;
  v1::Tensor* y = as_v1.mutable_y();
  y->set_dtype(v1::FP32);
  for (int64_t s : {c.batch, c.dim, c.seqlen}) y->add_shape(s);
  std::string bytes(static_cast<size_t>(y_bytes), '\0');
  ASSERT_TRUE(region_->Read(y_at, bytes.data(), y_bytes).ok());
  y->set_data(bytes);
  EXPECT_EQ(CheckForward(c, in, as_v1), "");
}

}  // namespace
}  // namespace conv1d::e2e
