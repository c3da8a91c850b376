// The in-process server with tensor bytes kept outside protobuf strings
// (server/frontend/wire_tensors.h): the same answers with
// host_tensor_min_bytes off, 0 and the default, unusual encodings answered
// and malformed ones rejected, a declared 2^31-byte tensor survived, and
// host_tensors auto. The parsing and serialization themselves are unit
// tested in tests/frontend/wire_tensors_test.cc.
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/common/test_seed.h"
#include "tests/e2e/e2e_util.h"
#include "tests/frontend/wire_bytes.h"

namespace conv1d::e2e {
namespace {

using ::testing::HasSubstr;

// The same 21 bytes sent to a server with the default host_tensor_min_bytes.
TEST(WireTensorsParseDeathTest, ServerSurvivesADeclaredDataLengthOf2To31) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string x = std::string("\x08\x01\x1a", 3) + Varint(uint64_t{1} << 31) +
                        std::string(10, 'z');
  const std::string bytes = Delimited(1, x);
  EXPECT_EXIT(
      {
        ServerOptions options;
        options.backend.name = BackendUnderTest();
        options.host_tensors = HostTensors::kAlways;
        TestServer ts;
        StartTestServer(std::move(options), &ts);
        if (ts.server == nullptr) std::exit(4);
        const grpc::Status s =
            RawUnaryCall(ts.channel.get(), "/conv1d.v1.Conv1d/Forward", bytes, nullptr);
        std::exit(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT ? 0 : 3);
      },
      ::testing::ExitedWithCode(0), "");
}

// ---------------------------------------------------------------------------
// The server, with host_tensor_min_bytes off, 0 and the default

class WireTensorsServer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    servers_ = new std::vector<std::pair<int64_t, TestServer>>();
    for (int64_t min_bytes : {int64_t{-1}, int64_t{0}, kDefaultMin}) {
      ServerOptions options;
      options.backend.name = BackendUnderTest();
      options.backend.threads = 2;
      options.host_tensor_min_bytes = min_bytes;
      options.host_tensors = HostTensors::kAlways;
      servers_->emplace_back(min_bytes, TestServer());
      StartTestServer(std::move(options), &servers_->back().second);
      if (servers_->back().second.server == nullptr) return;
    }
  }
  static void TearDownTestSuite() {
    delete servers_;
    servers_ = nullptr;
  }
  void SetUp() override {
    ASSERT_EQ(servers_->size(), 3u);
    for (auto& [m, ts] : *servers_) ASSERT_NE(ts.server, nullptr) << m;
  }

  // Sends `request` to every server; every answer parses, passes `check`
  // and equals the others. Returns the raw answers.
  template <typename Response, typename Check>
  std::vector<std::string> ExpectSameAnswers(const std::string& method, const std::string& request,
                         const Check& check) {
    std::vector<std::string> answers;
    std::string first;
    size_t first_raw = 0;
    for (auto& [min_bytes, ts] : *servers_) {
      SCOPED_TRACE(::testing::Message() << "host_tensor_min_bytes " << min_bytes);
      std::string raw;
      const grpc::Status s = RawUnaryCall(ts.channel.get(), method, request, &raw);
      EXPECT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
      Response r;
      EXPECT_TRUE(r.ParseFromString(raw));
      answers.push_back(raw);
      EXPECT_EQ(check(r), "");
      // Detached fields may come in another order; the sizes and the
      // messages are the same.
      const std::string canonical = r.SerializeAsString();
      if (first.empty()) {
        first = canonical;
        first_raw = raw.size();
      } else {
        EXPECT_EQ(raw.size(), first_raw);
        EXPECT_TRUE(canonical == first) << "response differs from host_tensor_min_bytes -1";
      }
    }
    return answers;
  }

  static std::vector<std::pair<int64_t, TestServer>>* servers_;
};
std::vector<std::pair<int64_t, TestServer>>* WireTensorsServer::servers_ = nullptr;

TEST_F(WireTensorsServer, ForwardAnswersAreTheSameForEveryThreshold) {
  CONV1D_TEST_SEED_SCOPE(test_seed, 41);
  Rng rng(test_seed);
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    Case c = LargeForwardCase(dtype);
    c.act = Activation::kSiLU;
    if (dtype == DType::kBF16) c.layout = Layout::kChannelLast;
    const Inputs in = MakeInputs(c, &rng);
    ASSERT_GE(in.x.data().size(), static_cast<size_t>(kDefaultMin));
    const std::vector<std::string> raw = ExpectSameAnswers<v1::ForwardResponse>(
        "/conv1d.v1.Conv1d/Forward", MakeForward(c, in).SerializeAsString(),
        [&](const v1::ForwardResponse& r) { return CheckForward(c, in, r); });
    ASSERT_EQ(raw.size(), 3u);
    // Evidence that the detached path ran: off, the answer is the ordinary
    // serialization (y, field 1, first); at the default threshold only y
    // (>= 4 KiB) is detached and sent after the inline final_states.
    EXPECT_EQ(raw[0][0], '\x0a');
    EXPECT_EQ(raw[2][0], '\x12');
  }
}

TEST_F(WireTensorsServer, BackwardAnswersAreTheSameForEveryThreshold) {
  CONV1D_TEST_SEED_SCOPE(test_seed, 42);
  Rng rng(test_seed);
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    Case c = LargeForwardCase(dtype);
    c.op = Op::kBackward;
    c.final_states = false;
    c.dfinal_states = c.dinitial_states = true;
    c.grad_fp32 = dtype == DType::kBF16;
    if (dtype == DType::kBF16) c.layout = Layout::kChannelLast;
    const Inputs in = MakeInputs(c, &rng);
    ExpectSameAnswers<v1::BackwardResponse>(
        "/conv1d.v1.Conv1d/Backward", MakeBackward(c, in).SerializeAsString(),
        [&](const v1::BackwardResponse& r) { return CheckBackward(c, in, r); });
  }
}

TEST_F(WireTensorsServer, UnusualEncodingsAreAnsweredAndMalformedOnesRejected) {
  CONV1D_TEST_SEED_SCOPE(test_seed, 43);
  Rng rng(test_seed);
  const Case c = LargeForwardCase(DType::kF32);
  const Inputs in = MakeInputs(c, &rng);
  const v1::ForwardRequest full = MakeForward(c, in);
  // x's dtype and shape first, then the whole request again without them.
  v1::ForwardRequest first;
  first.mutable_x()->set_dtype(full.x().dtype());
  first.mutable_x()->mutable_shape()->CopyFrom(full.x().shape());
  v1::ForwardRequest second = full;
  second.mutable_x()->clear_dtype();
  second.mutable_x()->clear_shape();
  ExpectSameAnswers<v1::ForwardResponse>(
      "/conv1d.v1.Conv1d/Forward", first.SerializeAsString() + second.SerializeAsString(),
      [&](const v1::ForwardResponse& r) { return CheckForward(c, in, r); });

  const std::string bytes = full.SerializeAsString();
  const std::string truncated = bytes.substr(0, bytes.size() / 3);  // inside x.data
  for (auto& [min_bytes, ts] : *servers_) {
    SCOPED_TRACE(min_bytes);
    const grpc::Status s =
        RawUnaryCall(ts.channel.get(), "/conv1d.v1.Conv1d/Forward", truncated, nullptr);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("conv1d.v1.ForwardRequest"));
  }
}

// host_tensors auto (the default) moves tensors only for a backend whose
TEST_F(WireTensorsServer, OverLongDataTagIsInvalidArgumentLikeProtobuf) {
  Rng rng(44);
  const Case c = LargeForwardCase(DType::kF32);
  const Inputs in = MakeInputs(c, &rng);
  v1::ForwardRequest rest = MakeForward(c, in);
  rest.clear_x();
  v1::Tensor x_shell = in.x;
  x_shell.clear_data();
  auto with_data_tag_bytes = [&](int n) {
    const std::string x = x_shell.SerializeAsString() + PaddedVarint(0x1a, n) +
                          Varint(in.x.data().size()) + in.x.data();
    return Delimited(1, x) + rest.SerializeAsString();
  };
  // Five bytes is still a tag to protobuf: answered, and correctly.
  ExpectSameAnswers<v1::ForwardResponse>(
      "/conv1d.v1.Conv1d/Forward", with_data_tag_bytes(5),
      [&](const v1::ForwardResponse& r) { return CheckForward(c, in, r); });
  for (int n : {6, 10}) {
    for (auto& [min_bytes, ts] : *servers_) {
      SCOPED_TRACE(::testing::Message() << min_bytes << ", tag of " << n << " bytes");
      const grpc::Status s = RawUnaryCall(ts.channel.get(), "/conv1d.v1.Conv1d/Forward",
                                          with_data_tag_bytes(n), nullptr);
      EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
      EXPECT_THAT(s.error_message(), HasSubstr("conv1d.v1.ForwardRequest"));
    }
  }
}

// host buffers are page-locked: the gpu backend with its host pool.
TEST(WireTensorsAuto, DetachesOnlyForBackendsThatPreferHostBuffers) {
  ServerOptions options;
  options.backend.name = BackendUnderTest();
  options.backend.threads = 2;
  TestServer ts;
  StartTestServer(std::move(options), &ts);
  ASSERT_NE(ts.server, nullptr);
  CONV1D_TEST_SEED_SCOPE(test_seed, 44);
  Rng rng(test_seed);
  const Case c = LargeForwardCase(DType::kF32);
  const Inputs in = MakeInputs(c, &rng);
  std::string raw;
  const grpc::Status s = RawUnaryCall(ts.channel.get(), "/conv1d.v1.Conv1d/Forward",
                                      MakeForward(c, in).SerializeAsString(), &raw);
  ASSERT_TRUE(s.ok()) << s.error_message();
  v1::ForwardResponse r;
  ASSERT_TRUE(r.ParseFromString(raw));
  EXPECT_EQ(CheckForward(c, in, r), "");
  // Detached y is sent after the inline final_states (field 2).
  EXPECT_EQ(raw[0], ts.server->backend().host_buffers() != nullptr ? '\x12' : '\x0a');
}

}  // namespace
}  // namespace conv1d::e2e
