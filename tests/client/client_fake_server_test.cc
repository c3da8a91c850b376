// Conv1dClient against an in-test fake conv1d.v1 service: retries with
// pushback, attempt limits, deadlines, async calls over several channels,
// typed calls from TensorViews, large messages, and grpc.health.v1 through gRPC's built-in health service
// (which checks that the client's copy of health.proto matches the wire).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/notification.h"
#include "client/conv1d_client.h"
#include "client/host_tensor.h"
#include "client/tensor_view.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "gtest/gtest.h"

namespace conv1d {
namespace {

using client::TensorView;

class FakeService final : public v1::Conv1d::Service {
 public:
  std::atomic<int> fail_forward{0};  // next calls answer UNAVAILABLE
  std::atomic<int> forward_calls{0};
  std::atomic<int> backward_calls{0};

  grpc::Status Forward(grpc::ServerContext* ctx, const v1::ForwardRequest* req,
                       v1::ForwardResponse* resp) override {
    ++forward_calls;
    if (fail_forward.fetch_sub(1) > 0) {
      ctx->AddTrailingMetadata("grpc-retry-pushback-ms", "5");
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "injected");
    }
    // y = 2 x, so answers can be told apart from echoes.
    absl::StatusOr<HostTensor> x = HostTensor::FromProto(req->x());
    if (!x.ok()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "x");
    std::vector<float> v = x->ToFloats();
    for (float& f : v) f *= 2;
    HostTensor::FromFloats(x->dtype, x->shape, v).ToProto(resp->mutable_y());
    return grpc::Status::OK;
  }
  grpc::Status Backward(grpc::ServerContext* ctx, const v1::BackwardRequest*,
                        v1::BackwardResponse*) override {
    ++backward_calls;
    ctx->AddTrailingMetadata("grpc-retry-pushback-ms", "-1");
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "queue full");
  }
  grpc::Status Update(grpc::ServerContext* ctx, const v1::UpdateRequest*,
                      v1::UpdateResponse*) override {
    for (int i = 0; i < 100 && !ctx->IsCancelled(); ++i) absl::SleepFor(absl::Milliseconds(10));
    return grpc::Status::OK;
  }
  grpc::Status ServerInfo(grpc::ServerContext* ctx, const v1::ServerInfoRequest*,
                          v1::ServerInfoResponse* resp) override {
    resp->set_backend("fake");
    // Echoes the authorization metadata, so tests can see what was sent.
    auto it = ctx->client_metadata().find("authorization");
    if (it != ctx->client_metadata().end()) {
      resp->set_version(std::string(it->second.data(), it->second.size()));
    }
    return grpc::Status::OK;
  }
};

class ClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.SetMaxReceiveMessageSize(1 << 30);
    b.SetMaxSendMessageSize(1 << 30);
    b.RegisterService(&service_);
    server_ = b.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    target_ = "127.0.0.1:" + std::to_string(port);
  }
  void TearDown() override { server_->Shutdown(); }

  std::unique_ptr<Conv1dClient> MakeClient(int channels = 1, int attempts = 4) {
    ClientOptions o;
    o.targets = {target_};
    o.num_channels = channels;
    o.retry.max_attempts = attempts;
    o.retry.initial_backoff = absl::Milliseconds(1);
    absl::StatusOr<std::unique_ptr<Conv1dClient>> c = Conv1dClient::Create(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return *std::move(c);
  }

  static v1::ForwardRequest Request(int64_t n, uint64_t seed) {
    v1::ForwardRequest r;
    HostTensor::Random(DType::kF32, {1, 1, n}, seed).ToProto(r.mutable_x());
    return r;
  }
  static void ExpectDoubled(const v1::ForwardRequest& req, const v1::ForwardResponse& resp) {
    std::vector<float> x = HostTensor::FromProto(req.x())->ToFloats();
    std::vector<float> y = HostTensor::FromProto(resp.y())->ToFloats();
    ASSERT_EQ(x.size(), y.size());
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(y[i], 2 * x[i]) << i;
  }

  FakeService service_;
  std::unique_ptr<grpc::Server> server_;
  std::string target_;
};

TEST_F(ClientTest, RetriesUnavailableHonouringPushback) {
  auto c = MakeClient();
  service_.fail_forward = 2;
  const v1::ForwardRequest req = Request(64, 1);
  const absl::Time t0 = absl::Now();
  absl::StatusOr<v1::ForwardResponse> r = c->Forward(req);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GE(absl::Now() - t0, absl::Milliseconds(10));  // two 5 ms pushbacks
  EXPECT_EQ(service_.forward_calls, 3);
  EXPECT_EQ(c->retried_calls(), 1);
  ExpectDoubled(req, *r);
}

TEST_F(ClientTest, StopsAtMaxAttemptsAndOnNegativePushback) {
  auto c = MakeClient(1, 3);
  service_.fail_forward = 100;
  EXPECT_EQ(c->Forward(Request(8, 2)).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(service_.forward_calls, 3);
  EXPECT_EQ(c->Backward(v1::BackwardRequest()).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(service_.backward_calls, 1);
  CallOptions once;
  once.max_attempts = 1;
  service_.forward_calls = 0;
  EXPECT_FALSE(c->Forward(Request(8, 2), once).ok());
  EXPECT_EQ(service_.forward_calls, 1);
}

TEST_F(ClientTest, DeadlineCoversTheCall) {
  auto c = MakeClient();
  CallOptions o;
  o.timeout = absl::Milliseconds(50);
  const absl::Time t0 = absl::Now();
  EXPECT_EQ(c->Update(v1::UpdateRequest(), o).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  // Well under the 1 s the fake's Update holds a call that is not cancelled,
  // with room for a loaded machine's late wake-ups.
  EXPECT_LT(absl::Now() - t0, absl::Milliseconds(900));
}

TEST_F(ClientTest, AsyncCallsOverSeveralChannelsWithRetries) {
  auto c = MakeClient(4);
  EXPECT_EQ(c->num_channels(), 4);
  service_.fail_forward = 5;
  constexpr int kCalls = 64;
  std::vector<std::shared_ptr<const v1::ForwardRequest>> reqs;
  for (int i = 0; i < kCalls; ++i) {
    reqs.push_back(std::make_shared<v1::ForwardRequest>(Request(100 + i, 10 + i)));
  }
  std::vector<absl::StatusOr<v1::ForwardResponse>> results(kCalls);
  absl::BlockingCounter done(kCalls);
  for (int i = 0; i < kCalls; ++i) {
    c->ForwardAsync(reqs[i], {}, [&, i](absl::StatusOr<v1::ForwardResponse> r) {
      results[i] = std::move(r);
      done.DecrementCount();
    });
  }
  done.Wait();
  for (int i = 0; i < kCalls; ++i) {
    ASSERT_TRUE(results[i].ok()) << i << results[i].status();
    ExpectDoubled(*reqs[i], *results[i]);
  }
  EXPECT_EQ(service_.forward_calls, kCalls + 5);
}

TEST_F(ClientTest, AsyncErrorsAndInfo) {
  auto c = MakeClient();
  absl::Notification n;
  absl::Status st;
  c->BackwardAsync(std::make_shared<v1::BackwardRequest>(), {},
                   [&](absl::StatusOr<v1::BackwardResponse> r) {
                     st = r.status();
                     n.Notify();
                   });
  n.WaitForNotification();
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  absl::StatusOr<v1::ServerInfoResponse> info = c->ServerInfo();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->backend(), "fake");
}

TEST_F(ClientTest, TypedCallsTakeViewsOfTheCallersArrays) {
  auto c = MakeClient();
  const std::vector<float> x = {1.5f, -2.f, 0.25f, 8.f, 3.f, -1.f};
  ForwardArgs args;
  args.x = TensorView(x.data(), {1, 2, 3});
  args.silu = true;
  absl::StatusOr<v1::ForwardResponse> r = c->Forward(args);
  ASSERT_TRUE(r.ok()) << r.status();
  absl::StatusOr<TensorView> y = TensorView::FromProto(r->y());
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->DebugString(), "fp32[1,2,3]");
  const std::vector<float> got = y->ToFloats();
  ASSERT_EQ(got.size(), x.size());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(got[i], 2 * x[i]) << i;

  // The async form builds its request before returning: the arrays may go.
  absl::Notification n;
  absl::StatusOr<v1::ForwardResponse> async;
  {
    std::vector<float> scratch = x;
    ForwardArgs a;
    a.x = TensorView(scratch.data(), {1, 1, 6});
    c->ForwardAsync(a, {}, [&](absl::StatusOr<v1::ForwardResponse> resp) {
      async = std::move(resp);
      n.Notify();
    });
    std::fill(scratch.begin(), scratch.end(), 0.f);
  }
  n.WaitForNotification();
  ASSERT_TRUE(async.ok()) << async.status();
  EXPECT_EQ(TensorView::FromProto(async->y())->ToFloats()[3], 16.f);
}

TEST_F(ClientTest, MessagesPastTheGrpcDefaultLimit) {
  auto c = MakeClient();
  const v1::ForwardRequest req = Request(2 << 20, 3);  // 8 MiB, twice the gRPC default
  absl::StatusOr<v1::ForwardResponse> r = c->Forward(req);
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectDoubled(req, *r);
}

TEST_F(ClientTest, HealthFollowsTheServer) {
  auto c = MakeClient();
  absl::StatusOr<HealthStatus> h = c->Health();
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(*h, HealthStatus::kServing);
  server_->GetHealthCheckService()->SetServingStatus(false);
  EXPECT_EQ(*c->Health(), HealthStatus::kNotServing);
  absl::Notification n;
  absl::StatusOr<HealthStatus> async;
  c->HealthAsync("", {}, [&](absl::StatusOr<HealthStatus> r) {
    async = r;
    n.Notify();
  });
  n.WaitForNotification();
  ASSERT_TRUE(async.ok());
  EXPECT_EQ(*async, HealthStatus::kNotServing);
  EXPECT_EQ(c->Health("no.such.Service").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ClientTest, SendsTheBearerTokenWithEveryCall) {
  const std::string file = absl::StrCat(::testing::TempDir(), "client_token_", getpid());
  std::ofstream(file) << "tok-123456789abcdef\nsecond line ignored\n";
  for (bool from_file : {false, true}) {
    ClientOptions o;
    o.targets = {target_};
    if (from_file) {
      o.security.token_file = file;
    } else {
      o.security.token = "tok-abcdef0123456789";
    }
    absl::StatusOr<std::unique_ptr<Conv1dClient>> c = Conv1dClient::Create(o);
    ASSERT_TRUE(c.ok()) << c.status();
    for (int i = 0; i < 2; ++i) {
      absl::StatusOr<v1::ServerInfoResponse> info = (*c)->ServerInfo();
      ASSERT_TRUE(info.ok()) << info.status();
      EXPECT_EQ(info->version(), from_file ? "Bearer tok-123456789abcdef"
                                           : "Bearer tok-abcdef0123456789");
    }
  }
  std::remove(file.c_str());
  absl::StatusOr<v1::ServerInfoResponse> none = MakeClient()->ServerInfo();
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->version(), "");
}

TEST_F(ClientTest, SecurityOptionsThatDoNotGoTogetherAreRefused) {
  const struct {
    ClientSecurity security;
    std::string want;
  } cases[] = {
      {{"", "c.pem", "", "", ""}, "tls_cert: needs tls_key"},
      {{"", "", "k.pem", "", ""}, "tls_key: needs tls_cert"},
      {{"", "c.pem", "k.pem", "", ""}, "tls_cert: needs tls_ca"},
      {{"/nonexistent/ca.pem", "", "", "", ""}, "tls_ca: cannot read"},
      {{"", "", "", "t", "/nonexistent"}, "token: give token or token_file"},
      {{"", "", "", "", "/nonexistent/token"}, "token_file: cannot read"},
      {{"", "", "", "a b", ""}, "token: has a space"},
  };
  for (const auto& c : cases) {
    ClientOptions o;
    o.targets = {target_};
    o.security = c.security;
    absl::StatusOr<std::unique_ptr<Conv1dClient>> made = Conv1dClient::Create(o);
    ASSERT_FALSE(made.ok()) << c.want;
    EXPECT_EQ(made.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(made.status().message().find(c.want), std::string::npos) << made.status();
  }
}

TEST_F(ClientTest, UnreachableServerIsUnavailable) {
  ClientOptions o;
  o.targets = {"127.0.0.1:1"};
  o.retry.max_attempts = 2;
  o.retry.initial_backoff = absl::Milliseconds(1);
  auto c = *Conv1dClient::Create(o);
  EXPECT_EQ(c->ServerInfo().status().code(), absl::StatusCode::kUnavailable);
  o.targets.clear();
  EXPECT_FALSE(Conv1dClient::Create(o).ok());
}

}  // namespace
}  // namespace conv1d
