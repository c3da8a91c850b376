// The C++ DecodeSession against the real conv1d_server binary (child
// processes): a chain of steps, then SIGTERM: the call in progress answers
// UNAVAILABLE and drained_state() holds the state, with which a session on a
// second server continues exactly (its y equal that server's Forward of the
// whole sequence).
#include "client/decode_session.h"

#include <signal.h>

#include <cmath>
#include <memory>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "client/host_tensor.h"
#include "tests/e2e/server_process.h"

namespace conv1d {
namespace {

using e2e::ServerProcess;

constexpr int64_t kB = 2, kD = 16, kW = 4;

std::unique_ptr<ServerProcess> StartServer() {
  auto p = std::make_unique<ServerProcess>(std::vector<std::string>{
      "--listen=127.0.0.1:0", "--metrics_listen=", "--backend=cpu", "--threads=1",
      "--drain_grace_ms=0", "--drain_timeout_s=10"});
  EXPECT_TRUE(p->started());
  EXPECT_NE(p->WaitForPort(absl::Seconds(20)), 0) << p->Log();
  return p;
}

std::unique_ptr<Conv1dClient> ClientOf(const ServerProcess& p) {
  ClientOptions o;
  o.targets = {absl::StrCat("127.0.0.1:", p.Port())};
  o.retry.max_attempts = 1;
  o.wait_for_ready = true;
  return *Conv1dClient::Create(o);
}

v1::OpenSessionRequest Open(const HostTensor& w, const HostTensor& b) {
  v1::OpenSessionRequest r;
  w.ToProto(r.mutable_inline_weights()->mutable_weight());
  b.ToProto(r.mutable_inline_weights()->mutable_bias());
  r.set_dtype(v1::FP32);
  r.set_activation(v1::ACTIVATION_SILU);
  r.set_batch(kB);
  return r;
}

TEST(DecodeSessionTest, DrainedStateResumesOnAnotherServer) {
  const uint64_t seed = 515;
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  const int64_t half = 16, len = 2 * half;
  const HostTensor x = HostTensor::Random(DType::kF32, {kB, kD, len}, seed);
  const HostTensor w = HostTensor::Random(DType::kF32, {kD, kW}, seed + 1);
  const HostTensor b = HostTensor::Random(DType::kF32, {kD}, seed + 2);
  const v1::Tensor xw = x.ToProto();
  std::vector<v1::Tensor> ys;
  std::optional<v1::Tensor> drained;
  {
    std::unique_ptr<ServerProcess> a = StartServer();
    std::unique_ptr<Conv1dClient> client = ClientOf(*a);
    absl::StatusOr<std::unique_ptr<DecodeSession>> s = DecodeSession::Open(*client, Open(w, b));
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ((*s)->opened().state_len(), kW - 1);
    for (int64_t t = 0; t < half; t += 4) {
      absl::StatusOr<v1::Tensor> y = (*s)->Step(SliceTokens(xw, false, t, 4));
      ASSERT_TRUE(y.ok()) << y.status();
      ys.push_back(*std::move(y));
    }
    EXPECT_FALSE((*s)->drained_state().has_value());
    ASSERT_EQ(kill(a->pid(), SIGTERM), 0);
    // Exports change nothing; the one the drain meets answers UNAVAILABLE.
    absl::Status st;
    for (int i = 0; i < 10000 && st.ok(); ++i) {
      st = (*s)->Export().status();
      absl::SleepFor(absl::Milliseconds(1));
    }
    EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
    drained = (*s)->drained_state();
    EXPECT_EQ((*s)->Step(SliceTokens(xw, false, 0, 1)).status().code(),
              absl::StatusCode::kUnavailable);
    EXPECT_EQ(a->Wait(absl::Seconds(15)), 0) << a->Log();
  }
  ASSERT_TRUE(drained.has_value());
  std::unique_ptr<ServerProcess> other = StartServer();
  std::unique_ptr<Conv1dClient> client = ClientOf(*other);
  v1::OpenSessionRequest open = Open(w, b);
  *open.mutable_conv_state() = *drained;
  absl::StatusOr<std::unique_ptr<DecodeSession>> s = DecodeSession::Open(*client, open);
  ASSERT_TRUE(s.ok()) << s.status();
  for (int64_t t = half; t < len; t += 4) {
    absl::StatusOr<v1::Tensor> y = (*s)->Step(SliceTokens(xw, false, t, 4));
    ASSERT_TRUE(y.ok()) << y.status();
    ys.push_back(*std::move(y));
  }
  EXPECT_TRUE((*s)->Close().ok());
  v1::ForwardRequest fwd;
  *fwd.mutable_x() = xw;
  *fwd.mutable_inline_weights() = open.inline_weights();
  fwd.set_activation(v1::ACTIVATION_SILU);
  absl::StatusOr<v1::ForwardResponse> whole = client->Forward(fwd);
  ASSERT_TRUE(whole.ok()) << whole.status();
  const std::vector<float> got = HostTensor::FromProto(ConcatTokens(ys, false))->ToFloats();
  const std::vector<float> want = HostTensor::FromProto(whole->y())->ToFloats();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_LE(std::fabs(got[i] - want[i]), 1e-6 * std::max(1.f, std::fabs(want[i])))
        << "element " << i;
  }
}

}  // namespace
}  // namespace conv1d
