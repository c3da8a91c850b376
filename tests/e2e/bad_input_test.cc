// Bad requests over a real port: each gets the right code and a message that
// names the field, while a well-behaved client keeps being served.
#include <atomic>
#include <functional>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/test_seed.h"
#include "tests/e2e/e2e_util.h"

namespace conv1d::e2e {
namespace {

using ::testing::HasSubstr;

class BadInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions options;
    options.backend.name = BackendUnderTest();
    options.backend.threads = 1;
    ASSERT_NO_FATAL_FAILURE(StartTestServer(std::move(options), &ts_));
    // A well-behaved client on its own connection, busy during every test.
    steady_ = std::thread([this] {
      Rng rng(seed_.seed() + 1);
      auto stub = v1::Conv1d::NewStub(
          MakeChannel(absl::StrCat("127.0.0.1:", ts_.server->bound_port()), true));
      while (!stop_.load()) {
        Case c = RandomCase(Op::kForward, &rng);
        Inputs in = MakeInputs(c, &rng);
        grpc::ClientContext ctx;
        v1::ForwardResponse r;
        grpc::Status s = stub->Forward(&ctx, MakeForward(c, in), &r);
        EXPECT_TRUE(s.ok()) << s.error_message();
        if (s.ok()) {
          EXPECT_EQ(CheckForward(c, in, r), "");
        }
        steady_ok_.fetch_add(s.ok() ? 1 : 0);
      }
    });
  }

  void TearDown() override {
    // Let the steady client get a few more answers after the bad ones.
    const int before = steady_ok_.load();
    const absl::Time give_up = absl::Now() + absl::Seconds(20);
    while (steady_ok_.load() < before + 3 && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    stop_ = true;
    steady_.join();
    EXPECT_GE(steady_ok_.load(), before + 3);
  }

  // A valid forward request: x [2, 8, 16] fp32, weight [8, 4], bias.
  v1::ForwardRequest Valid() {
    Case c;
    c.batch = 2;
    c.dim = 8;
    c.seqlen = 16;
    c.width = 4;
    c.bias = true;
    inputs_ = MakeInputs(c, &rng_);
    return MakeForward(c, inputs_);
  }

  grpc::Status Forward(const v1::ForwardRequest& r) {
    grpc::ClientContext ctx;
    v1::ForwardResponse resp;
    return ts_.stub->Forward(&ctx, r, &resp);
  }

  void ExpectInvalid(const v1::ForwardRequest& r, const std::string& text) {
    grpc::Status s = Forward(r);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr(text));
  }

  TestServer ts_;
  ::conv1d::testing::SeedScope seed_{11};
  Rng rng_{seed_.seed()};
  Inputs inputs_;
  std::thread steady_;
  std::atomic<bool> stop_{false};
  std::atomic<int> steady_ok_{0};
};

TEST_F(BadInputTest, ValidRequestSucceeds) { EXPECT_TRUE(Forward(Valid()).ok()); }

TEST_F(BadInputTest, WrongByteCount) {
  v1::ForwardRequest r = Valid();
  r.mutable_x()->mutable_data()->resize(100);
  ExpectInvalid(r, "x.data has 100 bytes, expected 1024 (shape [2,8,16] fp32)");
}

TEST_F(BadInputTest, DTypeUnset) {
  v1::ForwardRequest r = Valid();
  r.mutable_x()->set_dtype(v1::DTYPE_UNSPECIFIED);
  ExpectInvalid(r, "x.dtype is DTYPE_UNSPECIFIED");
  r = Valid();
  r.mutable_x()->set_dtype(static_cast<v1::DType>(9));
  ExpectInvalid(r, "x.dtype is unknown (9)");
}

TEST_F(BadInputTest, MissingTensors) {
  v1::ForwardRequest r = Valid();
  r.clear_x();
  ExpectInvalid(r, "x is missing");
  r = Valid();
  r.clear_inline_weights();
  ExpectInvalid(r, "weights: neither weights_name nor inline_weights");
  r = Valid();
  r.mutable_inline_weights()->clear_weight();
  ExpectInvalid(r, "inline_weights.weight is missing");
}

TEST_F(BadInputTest, ZeroAndNegativeDims) {
  v1::ForwardRequest r = Valid();
  r.mutable_x()->set_shape(1, 0);
  ExpectInvalid(r, "x.shape[1] is 0, expected >= 1");
  r = Valid();
  r.mutable_x()->set_shape(2, -16);
  ExpectInvalid(r, "x.shape[2] is -16, expected >= 1");
  r = Valid();
  r.mutable_x()->add_shape(1);
  ExpectInvalid(r, "x.shape [2,8,16,1] has rank 4, expected rank 3");
}

TEST_F(BadInputTest, HugeDeclaredShapeWithTinyData) {
  v1::ForwardRequest r = Valid();
  r.mutable_x()->set_shape(0, int64_t{1} << 40);
  r.mutable_x()->set_shape(2, int64_t{1} << 40);
  ExpectInvalid(r, "x.shape [1099511627776,8,1099511627776] has more elements than fit");
  r = Valid();
  r.mutable_x()->set_shape(0, int64_t{1} << 20);
  ExpectInvalid(r, "x.data has 1024 bytes, expected 536870912");
}

TEST_F(BadInputTest, MismatchedShapesAndDTypes) {
  v1::ForwardRequest r = Valid();
  *r.mutable_inline_weights()->mutable_weight() = RandomTensor(DType::kF32, {16, 4}, &rng_);
  ExpectInvalid(r, "inline_weights.weight.shape[0] is 16, expected 8 (D of x)");
  r = Valid();
  *r.mutable_inline_weights()->mutable_bias() = RandomTensor(DType::kF16, {8}, &rng_);
  ExpectInvalid(r, "inline_weights.bias.dtype is fp16, expected fp32");
  r = Valid();
  *r.mutable_initial_states() = RandomTensor(DType::kF32, {2, 8, 2}, &rng_);
  ExpectInvalid(r, "initial_states.shape[2] is 2, expected 3 (W-1)");
  r = Valid();
  *r.mutable_initial_states() = RandomTensor(DType::kBF16, {2, 8, 3}, &rng_);
  ExpectInvalid(r, "initial_states.dtype is bf16, expected fp32");
  r = Valid();
  r.set_layout(v1::LAYOUT_CHANNEL_LAST);  // x is now [B=2, L=8, D=16]
  ExpectInvalid(r, "inline_weights.weight.shape[0] is 8, expected 16 (D of x)");
  r = Valid();
  r.set_layout(static_cast<v1::Layout>(7));
  ExpectInvalid(r, "layout is 7");
}

TEST_F(BadInputTest, WidthPastTheLimit) {
  v1::ForwardRequest r = Valid();
  *r.mutable_inline_weights()->mutable_weight() = RandomTensor(DType::kF32, {8, 257}, &rng_);
  ExpectInvalid(r, "inline_weights.weight.shape[1] (width W) is 257, expected 1..256");
}

TEST_F(BadInputTest, BackwardDoutMustMatchX) {
  Case c;
  c.op = Op::kBackward;
  Inputs in = MakeInputs(c, &rng_);
  v1::BackwardRequest r = MakeBackward(c, in);
  *r.mutable_dout() = RandomTensor(DType::kF16, {1, 8, 16}, &rng_);
  grpc::ClientContext ctx;
  v1::BackwardResponse resp;
  grpc::Status s = ts_.stub->Backward(&ctx, r, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("dout.dtype is fp16, expected fp32"));
  *r.mutable_dout() = RandomTensor(DType::kF32, {1, 8, 15}, &rng_);
  grpc::ClientContext ctx2;
  s = ts_.stub->Backward(&ctx2, r, &resp);
  EXPECT_THAT(s.error_message(), HasSubstr("dout.shape[2] is 15, expected 16"));
}

TEST_F(BadInputTest, UpdateConvStateTooShort) {
  Case c;
  c.op = Op::kUpdate;
  c.seqlen = 1;
  c.state_len = 3;
  Inputs in = MakeInputs(c, &rng_);
  v1::UpdateRequest r = MakeUpdate(c, in);
  *r.mutable_conv_state() = RandomTensor(DType::kF32, {1, 8, 2}, &rng_);
  grpc::ClientContext ctx;
  v1::UpdateResponse resp;
  grpc::Status s = ts_.stub->Update(&ctx, r, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("conv_state.shape[2] is 2, expected >= 3"));
  r.clear_conv_state();
  grpc::ClientContext ctx2;
  s = ts_.stub->Update(&ctx2, r, &resp);
  EXPECT_THAT(s.error_message(), HasSubstr("conv_state is missing"));
}

TEST_F(BadInputTest, UnknownWeightsName) {
  v1::ForwardRequest r = Valid();
  r.set_weights_name("no/such/set");
  grpc::Status s = Forward(r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), HasSubstr("weights_name \"no/such/set\" is not registered"));
  r.set_weights_name("bad name!");
  ExpectInvalid(r, "weights_name: character 3");
}

TEST_F(BadInputTest, RegistryErrors) {
  v1::RegisterWeightsRequest reg;
  reg.set_name("w8");
  *reg.mutable_weight() = RandomTensor(DType::kF32, {8, 4}, &rng_);
  *reg.mutable_bias() = RandomTensor(DType::kBF16, {8}, &rng_);
  v1::RegisterWeightsResponse resp;
  {
    grpc::ClientContext ctx;
    grpc::Status s = ts_.stub->RegisterWeights(&ctx, reg, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("bias.dtype is bf16, expected fp32"));
  }
  reg.clear_bias();
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(ts_.stub->RegisterWeights(&ctx, reg, &resp).ok());
    EXPECT_EQ(resp.info().bytes(), 8 * 4 * 4);
  }
  {
    grpc::ClientContext ctx;
    EXPECT_EQ(ts_.stub->RegisterWeights(&ctx, reg, &resp).error_code(),
              grpc::StatusCode::ALREADY_EXISTS);
  }
  // Registered weights of another D do not fit x.
  v1::ForwardRequest r = Valid();
  *r.mutable_x() = RandomTensor(DType::kF32, {1, 5, 16}, &rng_);
  r.set_weights_name("w8");
  ExpectInvalid(r, "weights_name \"w8\" has D=8, but x has D=5");
  v1::UnregisterWeightsRequest un;
  un.set_name("w8");
  v1::UnregisterWeightsResponse un_resp;
  {
    grpc::ClientContext ctx;
    EXPECT_TRUE(ts_.stub->UnregisterWeights(&ctx, un, &un_resp).ok());
  }
  {
    grpc::ClientContext ctx;
    EXPECT_EQ(ts_.stub->UnregisterWeights(&ctx, un, &un_resp).error_code(),
              grpc::StatusCode::NOT_FOUND);
  }
}

TEST_F(BadInputTest, TruncatedAndGarbageMessages) {
  const std::string whole = Valid().SerializeAsString();
  const std::vector<std::string> bad = {
      whole.substr(0, whole.size() / 2),  // cut inside x.data
      whole.substr(0, 3),                 // cut inside x's length prefix
      std::string(64, '\xff'),            // invalid tags
      std::string("\x0a\xff\xff\xff\xff\x0f", 6),  // a 4 GiB length for x
  };
  for (const std::string& bytes : bad) {
    std::string response;
    grpc::Status s = RawUnaryCall(ts_.channel.get(), "/conv1d.v1.Conv1d/Forward", bytes,
                                  &response);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    EXPECT_THAT(s.error_message(),
                HasSubstr(absl::StrCat("request: ", bytes.size(),
                                       " bytes that do not parse as a conv1d.v1.ForwardRequest")));
  }
  {
    std::string response;
    grpc::Status s = RawUnaryCall(ts_.channel.get(), "/conv1d.v1.Conv1d/RegisterWeights",
                                  std::string(9, '\xff'), &response);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("conv1d.v1.RegisterWeightsRequest"));
  }
  // Parsable bytes that carry no tensors reach validation.
  std::string response;
  grpc::Status s = RawUnaryCall(ts_.channel.get(), "/conv1d.v1.Conv1d/Forward", "", &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("x is missing"));
  EXPECT_TRUE(Forward(Valid()).ok());
}

TEST(BadInputLimits, RequestOverMaxRequestBytesIsRefused) {
  ServerOptions options;
  options.backend.name = "echo";
  options.max_request_bytes = 4096;
  TestServer ts;
  ASSERT_NO_FATAL_FAILURE(StartTestServer(std::move(options), &ts));
  CONV1D_TEST_SEED_SCOPE(test_seed, 3);
  Rng rng(test_seed);
  Case c;  // x [1, 8, 16] fp32: 512 bytes in, 512 out, plus weights
  Inputs in = MakeInputs(c, &rng);
  grpc::ClientContext ok_ctx;
  v1::ForwardResponse resp;
  EXPECT_TRUE(ts.stub->Forward(&ok_ctx, MakeForward(c, in), &resp).ok());
  c.seqlen = 256;
  in = MakeInputs(c, &rng);
  grpc::ClientContext ctx;
  grpc::Status s = ts.stub->Forward(&ctx, MakeForward(c, in), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("max_request_bytes of 4096"));
}

}  // namespace
}  // namespace conv1d::e2e
