// Page-locked system regions and throughput against the real conv1d_server
// on the GPU backend, from a separate process:
//   - system regions: page-locked by the server at registration and moved
//     by DMA, the copy kernels or in place; values against the CPU
//     reference, and no warning that a region stayed pageable.
//   - the throughput of large-fwd at 8 clients with its tensors in gRPC
//     messages and in a device region (printed; answers checked).
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
#include "tests/common/shm_object.h"
#include "tests/common/test_seed.h"
#include "tests/gpu_e2e/gpu_e2e_util.h"

namespace conv1d::e2e {
namespace {

using ::conv1d::testing::ShmObject;
using ::testing::HasSubstr;

class SharedMemoryE2E : public GpuServerTest {};

// large-fwd (B=4, D=2048, L=2048 bf16: 32 MiB in, 32 MiB out) at 8 clients
// for two seconds each, with the tensors in gRPC messages and in a device
// region: prints requests per second (RecordProperty too). The first answer
// of each is checked against the CPU reference.
TEST_F(SharedMemoryE2E, LargeForwardThroughputByMemory) {
  constexpr int kClients = 8;
  CONV1D_TEST_SEED_SCOPE(seed, 29);
  Rng rng(seed);
  Case c;
  c.x_dtype = c.w_dtype = DType::kBF16;
  c.batch = 4;
  c.dim = 2048;
  c.seqlen = 2048;
  c.bias = true;
  c.act = Activation::kSiLU;
  const Inputs in = MakeInputs(c, &rng);
  const v1::ForwardRequest plain = MakeForward(c, in);
  const int64_t x_bytes = static_cast<int64_t>(in.x.data().size());
  absl::StatusOr<std::unique_ptr<DeviceRegion>> big =
      DeviceRegion::Create({.device = 0, .byte_size = (kClients + 2) * x_bytes});
  ASSERT_TRUE(big.ok()) << big.status();
  ASSERT_TRUE((*big)->Register(*channel_, "bench").ok());
  RegionLayout layout(big->get(), "bench");
  v1::ForwardRequest shared = plain;
  layout.PlaceInputs(&shared);  // one x and weights for every client
  std::vector<v1::ForwardRequest> per_client(kClients, shared);
  for (v1::ForwardRequest& q : per_client) layout.PlaceOutput(&q, "y", x_bytes);

  auto run = [&](const char* label, std::function<v1::ForwardRequest(int)> request_of) {
    std::atomic<int64_t> done{0};
    std::atomic<bool> failed{false};
    const absl::Time end = absl::Now() + absl::Seconds(2);
    std::vector<std::thread> clients;
    for (int t = 0; t < kClients; ++t) {
      clients.emplace_back([&, t] {
        auto stub = v1::Conv1d::NewStub(MakeChannel(
            absl::StrCat("127.0.0.1:", server_->Port()), /*fresh=*/true));
        const v1::ForwardRequest q = request_of(t);
        while (absl::Now() < end && !failed) {
          grpc::ClientContext ctx;
          v1::ForwardResponse r;
          if (!stub->Forward(&ctx, q, &r).ok()) failed = true;
          ++done;
        }
      });
    }
    for (std::thread& t : clients) t.join();
    EXPECT_FALSE(failed) << label;
    const double rps = static_cast<double>(done) / 2.0;
    std::printf("large-fwd c=%d %s: %.1f req/s\n", kClients, label, rps);
    RecordProperty(absl::StrCat("rps_", label), absl::StrCat(rps));
    return rps;
  };
  {
    grpc::ClientContext ctx;
    v1::ForwardResponse r;
    ASSERT_TRUE(stub_->Forward(&ctx, plain, &r).ok());
    EXPECT_EQ(CheckForward(c, in, r), "");
  }
  {
    grpc::ClientContext ctx;
    v1::ForwardResponse r;
    ASSERT_TRUE(stub_->Forward(&ctx, per_client[0], &r).ok());
    EXPECT_EQ(layout.FetchOutputs(&r), 1);
    EXPECT_EQ(CheckForward(c, in, r), "");
  }
  const double grpc_rps = run("grpc", [&](int) { return plain; });
  const double device_rps = run("device", [&](int t) { return per_client[t]; });
  std::printf("large-fwd c=%d device/grpc: %.1fx\n", kClients, device_rps / grpc_rps);
  EXPECT_TRUE((*big)->Unregister().ok());
}

// System regions on the GPU backend: page-locked at registration (no
// warning that one stays pageable), tensors of every size class (copy
// kernel, in place, DMA) right.
TEST_F(SharedMemoryE2E, PinnedSystemRegionsMatchTheCpu) {
  constexpr int64_t kSystemBytes = int64_t{16} << 20;
  ShmObject obj(kSystemBytes);
  {
    grpc::ClientContext ctx;
    inference::SystemSharedMemoryRegisterRequest req;
    req.set_name("sys");
    req.set_key(obj.key());
    req.set_byte_size(static_cast<uint64_t>(kSystemBytes));
    inference::SystemSharedMemoryRegisterResponse resp;
    const grpc::Status st = oip_->SystemSharedMemoryRegister(&ctx, req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  CONV1D_TEST_SEED_SCOPE(seed, 3);
  Rng rng(seed);
  for (int64_t seqlen : {int64_t{16}, int64_t{1000}, int64_t{20000}}) {
    for (Op op : {Op::kForward, Op::kBackward}) {
      Case c = RandomCase(op, &rng);
      c.batch = 2;
      c.dim = 32;
      c.seqlen = seqlen;
      const Inputs in = MakeInputs(c, &rng);
      // Inputs into the object, outputs back in the response.
      int64_t next = 0;
      auto place = [&](v1::Tensor* t) {
        if (t->data().empty()) return;
        std::memcpy(obj.data() + next, t->data().data(), t->data().size());
        t->mutable_shared_memory()->set_region("sys");
        t->mutable_shared_memory()->set_offset(next);
        next += (static_cast<int64_t>(t->data().size()) + 255) / 256 * 256;
        t->clear_data();
      };
      grpc::ClientContext ctx;
      std::string errors;
      grpc::Status st;
      if (op == Op::kForward) {
        v1::ForwardRequest q = MakeForward(c, in);
        place(q.mutable_x());
        if (q.has_initial_states()) place(q.mutable_initial_states());
        v1::ForwardResponse r;
        st = stub_->Forward(&ctx, q, &r);
        if (st.ok()) errors = CheckForward(c, in, r);
      } else {
        v1::BackwardRequest q = MakeBackward(c, in);
        place(q.mutable_x());
        place(q.mutable_dout());
        v1::BackwardResponse r;
        st = stub_->Backward(&ctx, q, &r);
        if (st.ok()) errors = CheckBackward(c, in, r);
      }
      ASSERT_TRUE(st.ok()) << c.DebugString() << ": " << st.error_message();
      EXPECT_EQ(errors, "") << c.DebugString();
    }
  }
  grpc::ClientContext ctx;
  inference::SystemSharedMemoryUnregisterRequest un;
  un.set_name("sys");
  inference::SystemSharedMemoryUnregisterResponse un_resp;
  ASSERT_TRUE(oip_->SystemSharedMemoryUnregister(&ctx, un, &un_resp).ok());
  EXPECT_THAT(server_->Log(), ::testing::Not(HasSubstr("stays pageable")));
}

}  // namespace
}  // namespace conv1d::e2e
