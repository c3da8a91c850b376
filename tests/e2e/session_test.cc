// Decode sessions end to end: the real server (CPU backend) on a loopback
// port, driven through the Decode stream and the unary session RPCs. Every
// chain of steps is compared with one Forward of the whole sequence from the
// same server, whose own correctness the other suites establish against an
// independent reference. Random inputs; each test prints its seed.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/core/dtype.h"
#include "server/core/fake_clock.h"
#include "tests/common/test_seed.h"
#include "tests/e2e/e2e_util.h"

namespace conv1d::e2e {
namespace {

constexpr int64_t kB = 2, kD = 6, kW = 4;

v1::DType Wire(DType t) {
  switch (t) {
    case DType::kF32: return v1::FP32;
    case DType::kF16: return v1::FP16;
    case DType::kBF16: return v1::BF16;
  }
  return v1::DTYPE_UNSPECIFIED;
}

DType Core(v1::DType t) {
  return t == v1::FP16 ? DType::kF16 : t == v1::BF16 ? DType::kBF16 : DType::kF32;
}

struct Weights {
  v1::Tensor weight, bias;
};

v1::OpenSessionRequest OpenRequest(DType dtype, const Weights& w, int64_t state_len = 0,
                                   int32_t max_draft = 0) {
  v1::OpenSessionRequest r;
  *r.mutable_inline_weights()->mutable_weight() = w.weight;
  *r.mutable_inline_weights()->mutable_bias() = w.bias;
  r.set_dtype(Wire(dtype));
  r.set_activation(v1::ACTIVATION_SILU);
  r.set_batch(kB);
  r.set_state_len(state_len);
  r.set_max_draft_tokens(max_draft);
  return r;
}

// Tokens [t0, t0 + n) of a channel-first x [B, D, L].
v1::Tensor Slice(const v1::Tensor& x, int64_t t0, int64_t n) {
  const int64_t b = x.shape(0), d = x.shape(1), len = x.shape(2);
  const int64_t e = DTypeSize(Core(x.dtype()));
  v1::Tensor out;
  out.set_dtype(x.dtype());
  for (int64_t v : {b, d, n}) out.add_shape(v);
  std::string* data = out.mutable_data();
  for (int64_t r = 0; r < b * d; ++r) data->append(x.data(), (r * len + t0) * e, n * e);
  return out;
}

// Appends a step's y [B, D, n] to the rows of `all` ([B*D] rows of floats).
void Append(const v1::Tensor& y, std::vector<std::vector<float>>* all) {
  const DType t = Core(y.dtype());
  const int64_t rows = y.shape(0) * y.shape(1), n = y.shape(2);
  all->resize(rows);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t s = 0; s < n; ++s) (*all)[r].push_back(LoadAsFloat(y.data().data(), t, r * n + s));
  }
}

// Within 1e-6 relative for fp32, half an ulp of headroom more for 16-bit.
void ExpectClose(const std::vector<std::vector<float>>& got, const v1::Tensor& want,
                 int64_t t0 = 0) {
  const DType t = Core(want.dtype());
  const double tol = t == DType::kF32 ? 1e-6 : t == DType::kF16 ? 1.0 / 1024 : 1.0 / 128;
  const int64_t len = want.shape(2);
  ASSERT_EQ(static_cast<int64_t>(got.size()), want.shape(0) * want.shape(1));
  int failures = 0;
  for (size_t r = 0; r < got.size(); ++r) {
    ASSERT_EQ(static_cast<int64_t>(got[r].size()), len - t0);
    for (int64_t s = t0; s < len; ++s) {
      const double w = LoadAsFloat(want.data().data(), t, r * len + s);
      const double g = got[r][s - t0];
      if (std::fabs(g - w) > tol * std::max(1.0, std::fabs(w)) && ++failures < 5) {
        ADD_FAILURE() << "row " << r << " token " << s << ": got " << g << ", want " << w;
      }
    }
  }
  EXPECT_EQ(failures, 0);
}

// The last K columns of x [B, D, L] as a [B, D, K] state.
v1::Tensor LastK(const v1::Tensor& x, int64_t k) { return Slice(x, x.shape(2) - k, k); }

// One Decode call driven synchronously.
class DecodeCall {
 public:
  explicit DecodeCall(v1::Conv1d::Stub* stub) : stream_(stub->Decode(&ctx_)) {}

  // Sends `req` and reads its answer; false when the stream ended instead.
  bool Send(const v1::DecodeRequest& req, v1::DecodeResponse* resp) {
    return stream_->Write(req) && stream_->Read(resp);
  }
  v1::OpenSessionResponse Open(const v1::OpenSessionRequest& open) {
    v1::DecodeRequest req;
    *req.mutable_open() = open;
    v1::DecodeResponse resp;
    EXPECT_TRUE(Send(req, &resp)) << End().error_message();
    return resp.open();
  }
  v1::Tensor Step(const v1::Tensor& x) {
    v1::DecodeRequest req;
    *req.mutable_step()->mutable_x() = x;
    v1::DecodeResponse resp;
    EXPECT_TRUE(Send(req, &resp)) << End().error_message();
    return resp.step().y();
  }
  void Commit(int64_t accepted) {
    v1::DecodeRequest req;
    req.mutable_commit()->set_accepted(accepted);
    v1::DecodeResponse resp;
    EXPECT_TRUE(Send(req, &resp)) << End().error_message();
  }
  std::string Fork() {
    v1::DecodeRequest req;
    req.mutable_fork();
    v1::DecodeResponse resp;
    EXPECT_TRUE(Send(req, &resp)) << End().error_message();
    return resp.fork().session_id();
  }
  v1::Tensor Export() {
    v1::DecodeRequest req;
    req.mutable_export_state();
    v1::DecodeResponse resp;
    EXPECT_TRUE(Send(req, &resp)) << End().error_message();
    return resp.export_state().conv_state();
  }
  // Sends `req`, expects the stream to end, returns its status.
  grpc::Status Fails(const v1::DecodeRequest& req) {
    v1::DecodeResponse resp;
    EXPECT_FALSE(Send(req, &resp)) << "answered: " << resp.ShortDebugString();
    return stream_->Finish();
  }
  grpc::Status End() {
    stream_->WritesDone();
    v1::DecodeResponse extra;
    while (stream_->Read(&extra)) {
    }
    return stream_->Finish();
  }
  // The server's x-request-id trailer; empty when absent. After End().
  std::string RequestId() const {
    const auto& trailers = ctx_.GetServerTrailingMetadata();
    auto it = trailers.find("x-request-id");
    return it == trailers.end() ? "" : std::string(it->second.data(), it->second.size());
  }
  grpc::ClientReaderWriter<v1::DecodeRequest, v1::DecodeResponse>* stream() {
    return stream_.get();
  }

 private:
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::DecodeRequest, v1::DecodeResponse>> stream_;
};

class SessionE2ETest : public ::testing::Test {
 protected:
  void Start(ServerOptions options = ServerOptions()) {
    options.backend.name = "cpu";
    options.backend.threads = 2;
    StartTestServer(std::move(options), &ts_);
  }

  Weights MakeWeights(DType dtype, Rng* rng) {
    return {RandomTensor(dtype, {kD, kW}, rng), RandomTensor(dtype, {kD}, rng)};
  }

  // The server's Forward of x with the session's weights.
  v1::Tensor Forward(const v1::Tensor& x, const Weights& w) {
    v1::ForwardRequest req;
    *req.mutable_x() = x;
    *req.mutable_inline_weights()->mutable_weight() = w.weight;
    *req.mutable_inline_weights()->mutable_bias() = w.bias;
    req.set_activation(v1::ACTIVATION_SILU);
    v1::ForwardResponse resp;
    grpc::ClientContext ctx;
    const grpc::Status st = ts_.stub->Forward(&ctx, req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp.y();
  }

  FakeClock clock_;  // outlives the server, whose sessions may use it
  TestServer ts_;
};

class ChainE2ETest : public SessionE2ETest, public ::testing::WithParamInterface<DType> {};

TEST_P(ChainE2ETest, ThousandOneTokenStepsOnAStreamEqualOneForward) {
  CONV1D_TEST_SEED_SCOPE(seed, 2000 + static_cast<int>(GetParam()));
  Rng rng(seed);
  Start();
  const DType t = GetParam();
  const Weights w = MakeWeights(t, &rng);
  const int64_t prefill = 24, len = prefill + 1000;
  const v1::Tensor x = RandomTensor(t, {kB, kD, len}, &rng);
  DecodeCall call(ts_.stub.get());
  v1::OpenSessionRequest open = OpenRequest(t, w);
  *open.mutable_prefill() = Slice(x, 0, prefill);
  const v1::OpenSessionResponse opened = call.Open(open);
  EXPECT_FALSE(opened.session_id().empty());
  EXPECT_EQ(opened.state_len(), kW - 1);
  std::vector<std::vector<float>> y;
  Append(opened.y(), &y);
  for (int64_t s = prefill; s < len; ++s) Append(call.Step(Slice(x, s, 1)), &y);
  ExpectClose(y, Forward(x, w));
  EXPECT_EQ(call.Export().data(), LastK(x, kW - 1).data());
  EXPECT_TRUE(call.End().ok());
  EXPECT_FALSE(call.RequestId().empty());
}

INSTANTIATE_TEST_SUITE_P(DTypes, ChainE2ETest,
                         ::testing::Values(DType::kF32, DType::kF16, DType::kBF16));

TEST_F(SessionE2ETest, MixedStepsWithCommitEqualNeverSendingTheRejectedTokens) {
  CONV1D_TEST_SEED_SCOPE(seed, 31);
  Rng rng(seed);
  Start();
  const Weights w = MakeWeights(DType::kF32, &rng);
  DecodeCall spec(ts_.stub.get());   // drafts up to 5 tokens, commits some
  DecodeCall plain(ts_.stub.get());  // sends the accepted tokens only
  spec.Open(OpenRequest(DType::kF32, w, /*state_len=*/5, /*max_draft=*/4));
  plain.Open(OpenRequest(DType::kF32, w, /*state_len=*/5));
  std::vector<v1::Tensor> accepted_x;
  std::vector<std::vector<float>> y_spec, y_plain;
  for (int round = 0; round < 40; ++round) {
    const int64_t n = 1 + static_cast<int64_t>(rng() % 5);
    const int64_t accepted = std::max<int64_t>(n - 4, static_cast<int64_t>(rng() % (n + 1)));
    const v1::Tensor x = RandomTensor(DType::kF32, {kB, kD, n}, &rng);
    const v1::Tensor y = spec.Step(x);
    spec.Commit(accepted);
    if (accepted == 0) continue;
    Append(Slice(y, 0, accepted), &y_spec);
    Append(plain.Step(Slice(x, 0, accepted)), &y_plain);
  }
  EXPECT_EQ(y_spec, y_plain);
  EXPECT_EQ(spec.Export().data(), plain.Export().data());
  EXPECT_TRUE(spec.End().ok());
  EXPECT_TRUE(plain.End().ok());
}

TEST_F(SessionE2ETest, ForkThenDivergingChainsOnTwoStreams) {
  CONV1D_TEST_SEED_SCOPE(seed, 41);
  Rng rng(seed);
  Start();
  const Weights w = MakeWeights(DType::kF32, &rng);
  const int64_t head = 10, tail = 12, len = head + tail;
  const v1::Tensor a = RandomTensor(DType::kF32, {kB, kD, len}, &rng);
  v1::Tensor b = RandomTensor(DType::kF32, {kB, kD, len}, &rng);
  for (int64_t r = 0; r < kB * kD; ++r) {  // b starts with a's head
    b.mutable_data()->replace(r * len * 4, head * 4, a.data(), r * len * 4, head * 4);
  }
  DecodeCall first(ts_.stub.get());
  v1::OpenSessionRequest open = OpenRequest(DType::kF32, w);
  *open.mutable_prefill() = Slice(a, 0, head);
  first.Open(open);
  const std::string fork_id = first.Fork();
  ASSERT_FALSE(fork_id.empty());
  DecodeCall second(ts_.stub.get());
  v1::OpenSessionRequest take;
  take.set_session_id(fork_id);
  EXPECT_EQ(second.Open(take).session_id(), fork_id);
  std::vector<std::vector<float>> ya, yb;
  for (int64_t s = head; s < len; s += 3) {
    Append(first.Step(Slice(a, s, 3)), &ya);
    Append(second.Step(Slice(b, s, 3)), &yb);
  }
  ExpectClose(ya, Forward(a, w), head);
  ExpectClose(yb, Forward(b, w), head);
  EXPECT_TRUE(first.End().ok());
  EXPECT_TRUE(second.End().ok());
  // The stream's end closed the fork too.
  v1::ExportSessionRequest req;
  req.set_session_id(fork_id);
  v1::ExportSessionResponse resp;
  grpc::ClientContext ctx;
  EXPECT_EQ(ts_.stub->ExportSession(&ctx, req, &resp).error_code(), grpc::NOT_FOUND);
}

TEST_F(SessionE2ETest, UnarySessionCalls) {
  CONV1D_TEST_SEED_SCOPE(seed, 51);
  Rng rng(seed);
  Start();
  const Weights w = MakeWeights(DType::kF32, &rng);
  const int64_t len = 30;
  const v1::Tensor x = RandomTensor(DType::kF32, {kB, kD, len}, &rng);
  v1::OpenSessionResponse opened;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(ts_.stub->OpenSession(&ctx, OpenRequest(DType::kF32, w, 0, 2), &opened).ok());
  }
  std::vector<std::vector<float>> y;
  for (int64_t s = 0; s < len; s += 2) {
    v1::UpdateRequest req;
    req.set_session_id(opened.session_id());
    // A 3-token draft of which 2 are kept; the third is the next step's first.
    const int64_t n = std::min<int64_t>(3, len - s);
    *req.mutable_x() = Slice(x, s, n);
    v1::UpdateResponse resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(ts_.stub->Update(&ctx, req, &resp).ok());
    EXPECT_FALSE(resp.has_conv_state());
    const int64_t keep = std::min<int64_t>(2, n);
    Append(Slice(resp.y(), 0, keep), &y);
    v1::CommitSessionRequest commit;
    commit.set_session_id(opened.session_id());
    commit.set_accepted(keep);
    v1::CommitSessionResponse done;
    grpc::ClientContext cctx;
    ASSERT_TRUE(ts_.stub->CommitSession(&cctx, commit, &done).ok());
  }
  ExpectClose(y, Forward(x, w));
  v1::ExportSessionRequest ex;
  ex.set_session_id(opened.session_id());
  v1::ExportSessionResponse state;
  grpc::ClientContext ectx;
  ASSERT_TRUE(ts_.stub->ExportSession(&ectx, ex, &state).ok());
  EXPECT_EQ(state.conv_state().data(), LastK(x, kW - 1).data());
  v1::ForkSessionRequest fork;
  fork.set_session_id(opened.session_id());
  v1::ForkSessionResponse forked;
  grpc::ClientContext fctx;
  ASSERT_TRUE(ts_.stub->ForkSession(&fctx, fork, &forked).ok());
  for (const std::string& id : {opened.session_id(), forked.session_id()}) {
    v1::CloseSessionRequest close;
    close.set_session_id(id);
    v1::CloseSessionResponse closed;
    grpc::ClientContext cctx;
    EXPECT_TRUE(ts_.stub->CloseSession(&cctx, close, &closed).ok());
  }
  v1::UpdateRequest after;
  after.set_session_id(opened.session_id());
  *after.mutable_x() = Slice(x, 0, 1);
  v1::UpdateResponse resp;
  grpc::ClientContext actx;
  const grpc::Status st = ts_.stub->Update(&actx, after, &resp);
  EXPECT_EQ(st.error_code(), grpc::NOT_FOUND);
  EXPECT_NE(st.error_message().find("session_id"), std::string::npos) << st.error_message();
  EXPECT_EQ(ts_.server->sessions()->open_sessions(), 0);
}

void ExpectFails(const grpc::Status& st, grpc::StatusCode code, const std::string& field) {
  EXPECT_EQ(st.error_code(), code) << st.error_message();
  EXPECT_NE(st.error_message().find(field), std::string::npos)
      << "message does not name " << field << ": " << st.error_message();
}

TEST_F(SessionE2ETest, BadInputsGetTheirCodeAndNameTheField) {
  CONV1D_TEST_SEED_SCOPE(test_seed, 61);
  Rng rng(test_seed);
  ServerOptions options;
  options.max_sessions = 2;
  Start(std::move(options));
  const Weights w = MakeWeights(DType::kF32, &rng);
  v1::DecodeRequest step;
  *step.mutable_step()->mutable_x() = RandomTensor(DType::kF32, {kB, kD, 1}, &rng);
  {
    DecodeCall call(ts_.stub.get());
    ExpectFails(call.Fails(step), grpc::INVALID_ARGUMENT, "open");
  }
  v1::DecodeRequest open;
  *open.mutable_open() = OpenRequest(DType::kF32, w);
  {
    DecodeCall call(ts_.stub.get());
    call.Open(open.open());
    ExpectFails(call.Fails(open), grpc::INVALID_ARGUMENT, "open");
  }
  struct BadStep {
    v1::Tensor x;
    std::string field;
  };
  v1::Tensor empty = RandomTensor(DType::kF32, {kB, kD, 1}, &rng);
  empty.set_shape(2, 0);
  empty.clear_data();
  const BadStep bad_steps[] = {
      {RandomTensor(DType::kF32, {kB, kD + 1, 1}, &rng), "step.x.shape[1]"},
      {RandomTensor(DType::kF16, {kB, kD, 1}, &rng), "step.x.dtype"},
      {RandomTensor(DType::kF32, {kB + 1, kD, 1}, &rng), "step.x.shape[0]"},
      {empty, "step.x.shape[2]"},
  };
  for (const BadStep& bad : bad_steps) {
    SCOPED_TRACE(bad.field);
    DecodeCall call(ts_.stub.get());
    call.Open(open.open());
    v1::DecodeRequest req;
    *req.mutable_step()->mutable_x() = bad.x;
    ExpectFails(call.Fails(req), grpc::INVALID_ARGUMENT, bad.field);
  }
  {
    DecodeCall call(ts_.stub.get());
    call.Open(open.open());
    call.Step(RandomTensor(DType::kF32, {kB, kD, 2}, &rng));
    v1::DecodeRequest commit;
    commit.mutable_commit()->set_accepted(3);
    ExpectFails(call.Fails(commit), grpc::INVALID_ARGUMENT, "accepted");
  }
  {
    DecodeCall call(ts_.stub.get());
    v1::DecodeRequest bad_open = open;
    bad_open.mutable_open()->set_state_len(1);
    ExpectFails(call.Fails(bad_open), grpc::INVALID_ARGUMENT, "open.state_len");
  }
  // Two slots: two streams hold them, a third session is refused, nobody
  // is evicted, and a freed slot serves again.
  DecodeCall one(ts_.stub.get()), two(ts_.stub.get());
  one.Open(open.open());
  two.Open(open.open());
  v1::OpenSessionResponse opened;
  {
    grpc::ClientContext ctx;
    ExpectFails(ts_.stub->OpenSession(&ctx, open.open(), &opened), grpc::RESOURCE_EXHAUSTED,
                "max_sessions");
  }
  one.Step(RandomTensor(DType::kF32, {kB, kD, 1}, &rng));
  two.Step(RandomTensor(DType::kF32, {kB, kD, 1}, &rng));
  EXPECT_TRUE(one.End().ok());
  {
    grpc::ClientContext ctx;
    EXPECT_TRUE(ts_.stub->OpenSession(&ctx, open.open(), &opened).ok());
  }
  EXPECT_TRUE(two.End().ok());
  {
    v1::UpdateRequest req;
    req.set_session_id("s-no-such-session");
    *req.mutable_x() = RandomTensor(DType::kF32, {kB, kD, 1}, &rng);
    v1::UpdateResponse resp;
    grpc::ClientContext ctx;
    ExpectFails(ts_.stub->Update(&ctx, req, &resp), grpc::NOT_FOUND, "session_id");
  }
  {
    v1::UpdateRequest req;
    req.set_session_id(opened.session_id());
    *req.mutable_x() = RandomTensor(DType::kF32, {kB, kD, 1}, &rng);
    *req.mutable_conv_state() = RandomTensor(DType::kF32, {kB, kD, 3}, &rng);
    v1::UpdateResponse resp;
    grpc::ClientContext ctx;
    ExpectFails(ts_.stub->Update(&ctx, req, &resp), grpc::INVALID_ARGUMENT, "conv_state");
  }
}

TEST_F(SessionE2ETest, IdleSessionsExpireWithTheFakeClock) {
  CONV1D_TEST_SEED_SCOPE(test_seed, 71);
  Rng rng(test_seed);
  FakeClock& clock = clock_;
  ServerOptions options;
  options.session_idle_timeout_s = 10;
  options.session_clock = &clock;
  Start(std::move(options));
  const Weights w = MakeWeights(DType::kF32, &rng);
  v1::OpenSessionResponse opened;
  grpc::ClientContext ctx;
  ASSERT_TRUE(ts_.stub->OpenSession(&ctx, OpenRequest(DType::kF32, w), &opened).ok());
  clock.Advance(absl::Seconds(9));
  EXPECT_EQ(ts_.server->sessions()->ExpireIdle(), 0);
  clock.Advance(absl::Seconds(1));
  // The reaper thread may expire it first, on the same clock.
  EXPECT_LE(ts_.server->sessions()->ExpireIdle(), 1);
  v1::UpdateRequest req;
  req.set_session_id(opened.session_id());
  *req.mutable_x() = RandomTensor(DType::kF32, {kB, kD, 1}, &rng);
  v1::UpdateResponse resp;
  grpc::ClientContext uctx;
  ExpectFails(ts_.stub->Update(&uctx, req, &resp), grpc::NOT_FOUND, "session_id");
}

TEST_F(SessionE2ETest, DrainExportsTheStateAndAResumedSessionContinuesExactly) {
  CONV1D_TEST_SEED_SCOPE(seed, 81);
  Rng rng(seed);
  Start();
  const Weights w = MakeWeights(DType::kF32, &rng);
  const int64_t half = 20, len = 2 * half;
  const v1::Tensor x = RandomTensor(DType::kF32, {kB, kD, len}, &rng);
  std::vector<std::vector<float>> y;
  v1::Tensor exported;
  {
    DecodeCall call(ts_.stub.get());
    call.Open(OpenRequest(DType::kF32, w));
    for (int64_t s = 0; s < half; ++s) Append(call.Step(Slice(x, s, 1)), &y);
    std::thread drain([&] { ts_.server->Shutdown(absl::Now() + absl::Seconds(10)); });
    v1::DecodeResponse last;
    ASSERT_TRUE(call.stream()->Read(&last));
    EXPECT_TRUE(last.draining());
    exported = last.export_state().conv_state();
    const grpc::Status st = call.stream()->Finish();
    EXPECT_EQ(st.error_code(), grpc::UNAVAILABLE) << st.error_message();
    drain.join();
  }
  EXPECT_EQ(exported.data(), LastK(Slice(x, 0, half), kW - 1).data());
  Start();  // another replica
  DecodeCall call(ts_.stub.get());
  v1::OpenSessionRequest open = OpenRequest(DType::kF32, w);
  *open.mutable_conv_state() = exported;
  *open.mutable_prefill() = Slice(x, half, half);
  Append(call.Open(open).y(), &y);
  ExpectClose(y, Forward(x, w));
  EXPECT_TRUE(call.End().ok());
}

}  // namespace
}  // namespace conv1d::e2e
