// The inference protocol frontend in-process, against the conv1d.v1 one on
// the same server: requests of both fuse into one backend batch, a region in
// use cannot be unregistered, and conv1d.v1 tensors read and write
// registered shared memory.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "inference/grpc_predict_v2.grpc.pb.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "server/backends/echo/echo_backend.h"
#include "server/frontend/oip_wire.h"
#include "tests/e2e/e2e_util.h"
#include "tests/common/shm_object.h"

namespace conv1d::e2e {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::conv1d::testing::ShmObject;

// Echo compute behind a gate that records how many requests each batch had.
class CountingGate final : public Backend {
 public:
  const char* name() const override { return "counting-gate"; }
  std::vector<std::string> devices() const override { return {"gate"}; }
  int num_lanes() const override { return 1; }
  absl::Status RunBatch(int, const BatchKey&, absl::Span<ConvSegment* const> segments,
                        BatchStats*) override {
    absl::MutexLock lock(&mu_);
    batches_.push_back(static_cast<int>(segments.size()));
    mu_.Await(absl::Condition(&open_));
    for (ConvSegment* s : segments) EchoBackend::EchoSegment(*s);
    return absl::OkStatus();
  }
  void Open() {
    absl::MutexLock lock(&mu_);
    open_ = true;
  }
  bool AwaitBatches(size_t n) {
    absl::MutexLock lock(&mu_);
    auto reached = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return batches_.size() >= n;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&reached), absl::Seconds(10));
  }
  std::vector<int> batches() {
    absl::MutexLock lock(&mu_);
    return batches_;
  }

 private:
  absl::Mutex mu_;
  bool open_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<int> batches_ ABSL_GUARDED_BY(mu_);
};

inference::ModelInferRequest OipForward(const Inputs& in) {
  inference::ModelInferRequest req;
  req.set_model_name("conv1d_forward");
  for (auto [name, t] : {std::pair<const char*, const v1::Tensor*>{"x", &in.x},
                         {"weight", &in.weight}}) {
    auto* input = req.add_inputs();
    input->set_name(name);
    input->set_datatype("FP32");
    input->mutable_shape()->Assign(t->shape().begin(), t->shape().end());
    req.add_raw_input_contents(t->data());
  }
  return req;
}

class OipE2eTest : public ::testing::Test {
 protected:
  void Start(std::unique_ptr<Backend> backend) {
    ServerOptions options;
    if (backend != nullptr) {
      options.backend_instance = std::move(backend);
    } else {
      options.backend.name = BackendUnderTest();
    }
    ASSERT_NO_FATAL_FAILURE(StartTestServer(std::move(options), &ts_));
    oip_ = inference::GRPCInferenceService::NewStub(ts_.channel);
  }
  grpc::Status Register(const std::string& name, const ShmObject& obj) {
    grpc::ClientContext ctx;
    inference::SystemSharedMemoryRegisterRequest req;
    inference::SystemSharedMemoryRegisterResponse resp;
    req.set_name(name);
    req.set_key(obj.key());
    req.set_byte_size(obj.size());
    return oip_->SystemSharedMemoryRegister(&ctx, req, &resp);
  }
  grpc::Status Unregister(const std::string& name) {
    grpc::ClientContext ctx;
    inference::SystemSharedMemoryUnregisterRequest req;
    inference::SystemSharedMemoryUnregisterResponse resp;
    req.set_name(name);
    return oip_->SystemSharedMemoryUnregister(&ctx, req, &resp);
  }

  TestServer ts_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> oip_;
};

TEST_F(OipE2eTest, RequestsOfBothProtocolsFuseIntoOneBatch) {
  auto backend = std::make_unique<CountingGate>();
  CountingGate* gate = backend.get();
  ASSERT_NO_FATAL_FAILURE(Start(std::move(backend)));
  Rng rng(11);
  Case c;  // fp32, D=8, W=4, no bias: the same key for all three requests
  const Inputs plug = MakeInputs(c, &rng), a = MakeInputs(c, &rng), b = MakeInputs(c, &rng);

  // The first request holds the only lane; the next two queue behind it.
  std::vector<std::thread> clients;
  grpc::Status s_plug, s_v1, s_oip;
  v1::ForwardResponse r_plug, r_v1;
  inference::ModelInferResponse r_oip;
  clients.emplace_back([&] {
    grpc::ClientContext ctx;
    s_plug = ts_.stub->Forward(&ctx, MakeForward(c, plug), &r_plug);
  });
  ASSERT_TRUE(gate->AwaitBatches(1));
  clients.emplace_back([&] {
    grpc::ClientContext ctx;
    s_v1 = ts_.stub->Forward(&ctx, MakeForward(c, a), &r_v1);
  });
  clients.emplace_back([&] {
    grpc::ClientContext ctx;
    s_oip = oip_->ModelInfer(&ctx, OipForward(b), &r_oip);
  });
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (ts_.server->queued_requests() < 2 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_EQ(ts_.server->queued_requests(), 2);
  gate->Open();
  for (std::thread& t : clients) t.join();
  ASSERT_TRUE(s_plug.ok()) << s_plug.error_message();
  ASSERT_TRUE(s_v1.ok()) << s_v1.error_message();
  ASSERT_TRUE(s_oip.ok()) << s_oip.error_message();
  EXPECT_THAT(gate->batches(), ElementsAre(1, 2));
  // Echo: y is x, byte for byte, in both protocols.
  EXPECT_EQ(r_v1.y().data(), a.x.data());
  ASSERT_EQ(r_oip.raw_output_contents_size(), 1);
  EXPECT_EQ(r_oip.outputs(0).name(), "y");
  EXPECT_EQ(r_oip.raw_output_contents(0), b.x.data());
}

TEST_F(OipE2eTest, RegionInUseCannotBeUnregisteredUntilItsRequestFinishes) {
  auto backend = std::make_unique<CountingGate>();
  CountingGate* gate = backend.get();
  ASSERT_NO_FATAL_FAILURE(Start(std::move(backend)));
  Rng rng(12);
  Case c;
  const Inputs in = MakeInputs(c, &rng);
  ShmObject obj(1 << 16);
  std::memcpy(obj.data(), in.x.data().data(), in.x.data().size());
  ASSERT_TRUE(Register("held", obj).ok());

  inference::ModelInferRequest req = OipForward(in);
  req.clear_raw_input_contents();
  auto* x = req.mutable_inputs(0);
  (*x->mutable_parameters())["shared_memory_region"].set_string_param("held");
  (*x->mutable_parameters())["shared_memory_byte_size"].set_int64_param(
      static_cast<int64_t>(in.x.data().size()));
  auto* w = req.mutable_inputs(1);
  w->mutable_contents()->mutable_fp32_contents()->Resize(
      static_cast<int>(in.weight.data().size() / 4), 0.0f);
  std::memcpy(w->mutable_contents()->mutable_fp32_contents()->mutable_data(),
              in.weight.data().data(), in.weight.data().size());
  grpc::Status status;
  inference::ModelInferResponse resp;
  std::thread client([&] {
    grpc::ClientContext ctx;
    status = oip_->ModelInfer(&ctx, req, &resp);
  });
  ASSERT_TRUE(gate->AwaitBatches(1));
  grpc::Status busy = Unregister("held");
  EXPECT_EQ(busy.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(busy.error_message(), HasSubstr("\"held\" is in use by 1 in-flight"));
  gate->Open();
  client.join();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(resp.raw_output_contents(0), in.x.data());
  EXPECT_TRUE(Unregister("held").ok());
  EXPECT_EQ(Unregister("held").error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(OipE2eTest, V1TensorsReadAndWriteRegisteredSharedMemory) {
  ASSERT_NO_FATAL_FAILURE(Start(nullptr));
  Rng rng(13);
  Case c;
  c.bias = true;
  c.final_states = true;
  c.act = Activation::kSiLU;
  const Inputs in = MakeInputs(c, &rng);
  ShmObject obj(1 << 16);
  ASSERT_TRUE(Register("io", obj).ok());
  const int64_t x_bytes = static_cast<int64_t>(in.x.data().size());
  const int64_t w_bytes = static_cast<int64_t>(in.weight.data().size());
  std::memcpy(obj.data(), in.x.data().data(), x_bytes);
  std::memcpy(obj.data() + x_bytes, in.weight.data().data(), w_bytes);

  v1::ForwardRequest req = MakeForward(c, in);
  req.mutable_x()->clear_data();
  req.mutable_x()->mutable_shared_memory()->set_region("io");
  auto* weight = req.mutable_inline_weights()->mutable_weight();
  weight->clear_data();
  weight->mutable_shared_memory()->set_region("io");
  weight->mutable_shared_memory()->set_offset(x_bytes);
  const int64_t y_offset = 32768;
  (*req.mutable_output_shared_memory())["y"].set_region("io");
  (*req.mutable_output_shared_memory())["y"].set_offset(y_offset);
  v1::ForwardResponse resp;
  {
    grpc::ClientContext ctx;
    grpc::Status s = ts_.stub->Forward(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  EXPECT_TRUE(resp.y().data().empty());
  EXPECT_EQ(resp.y().shared_memory().region(), "io");
  EXPECT_EQ(resp.y().shared_memory().offset(), y_offset);
  EXPECT_FALSE(resp.final_states().data().empty());  // not asked into the region
  resp.mutable_y()->set_data(obj.data() + y_offset, x_bytes);  // y has x's size
  EXPECT_EQ(CheckForward(c, in, resp), "");

  // Ranges and regions are checked per request, naming the field.
  grpc::ClientContext ctx1, ctx2, ctx3;
  v1::ForwardRequest bad = req;
  bad.mutable_x()->mutable_shared_memory()->set_offset((1 << 16) - 8);
  grpc::Status s = ts_.stub->Forward(&ctx1, bad, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("x: "));
  bad = req;
  bad.mutable_x()->mutable_shared_memory()->set_region("nowhere");
  s = ts_.stub->Forward(&ctx2, bad, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), HasSubstr("\"nowhere\" is not registered"));
  bad = req;
  (*bad.mutable_output_shared_memory())["dx"].set_region("io");
  s = ts_.stub->Forward(&ctx3, bad, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("output_shared_memory[\"dx\"]"));
  EXPECT_TRUE(Unregister("io").ok());
}

grpc::ByteBuffer Serialize(const google::protobuf::Message& m) {
  const std::string bytes = m.SerializeAsString();
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

TEST(OipWire, LargeRawContentsTravelOutsideTheMessagesAndRoundTrip) {
  inference::ModelInferRequest req;
  req.set_model_name("conv1d_forward");
  req.add_raw_input_contents(std::string(8, 'a'));     // stays in the message
  req.add_raw_input_contents(std::string(4096, 'b'));  // moves to a host buffer
  req.add_raw_input_contents("");
  int allocations = 0;
  const HostAllocator allocate = [&](int64_t bytes) {
    ++allocations;
    return HeapHostBuffers().Allocate(bytes);
  };
  inference::ModelInferRequest parsed;
  RawBuffers raw;
  ASSERT_TRUE(ParseInferRequest(Serialize(req), 64, allocate, &parsed, &raw).ok());
  EXPECT_EQ(allocations, 1);
  EXPECT_EQ(parsed.model_name(), "conv1d_forward");
  ASSERT_EQ(parsed.raw_input_contents_size(), 3);
  EXPECT_EQ(parsed.raw_input_contents(0), std::string(8, 'a'));
  EXPECT_TRUE(parsed.raw_input_contents(1).empty());
  EXPECT_EQ(raw.Find(0), nullptr);
  ASSERT_NE(raw.Find(1), nullptr);
  EXPECT_EQ(raw.bytes[1], 4096);
  EXPECT_EQ(std::string(static_cast<const char*>(raw.Find(1)->data.get()), 4096),
            std::string(4096, 'b'));
  // min_bytes < 0 moves nothing.
  ASSERT_TRUE(ParseInferRequest(Serialize(req), -1, allocate, &parsed, &raw).ok());
  EXPECT_EQ(parsed.raw_input_contents(1), std::string(4096, 'b'));
  EXPECT_EQ(raw.Find(1), nullptr);

  // Responses: buffered entries are sent from their buffers, in order.
  inference::ModelInferResponse resp;
  resp.set_model_name("conv1d_forward");
  resp.add_outputs()->set_name("y");
  resp.add_outputs()->set_name("final_states");
  resp.add_raw_output_contents();          // from a buffer
  resp.add_raw_output_contents("small");   // inline
  RawBuffers out;
  out.buffers.resize(1);
  out.bytes.resize(1);
  out.buffers[0] = HeapHostBuffers().Allocate(3000);
  std::memset(out.buffers[0].data.get(), 'y', 3000);
  out.bytes[0] = 3000;
  grpc::ByteBuffer wire;
  ASSERT_TRUE(SerializeInferResponse(&resp, out, &wire).ok());
  inference::ModelInferResponse back;
  grpc::ProtoBufferReader reader(&wire);
  ASSERT_TRUE(back.ParseFromZeroCopyStream(&reader));
  EXPECT_EQ(back.outputs_size(), 2);
  ASSERT_EQ(back.raw_output_contents_size(), 2);
  EXPECT_EQ(back.raw_output_contents(0), std::string(3000, 'y'));
  EXPECT_EQ(back.raw_output_contents(1), "small");
}

}  // namespace
}  // namespace conv1d::e2e
