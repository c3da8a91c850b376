// Decode sessions and shared-memory regions belong to the principal that
// opened or registered them (docs/security.md, "Sessions and shared
// memory"): the server (CPU backend) on a loopback port with a real token
// file of two `infer` principals and one `admin`, driven through conv1d.v1
// and the inference protocol. Another tenant's session or region is
// NOT_FOUND, word for word as an unknown one; an admin may close sessions
// and list and unregister regions but not use them; a session someone else
// tried to touch goes on as if nobody had (its answers match a float64
// reference of the whole sequence, its state the last inputs). Without a
// token file everything is everyone's, as before.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "inference/grpc_predict_v2.grpc.pb.h"
#include "server/frontend/auth.h"
#include "tests/common/reference.h"
#include "tests/common/test_seed.h"
#include "tests/e2e/e2e_util.h"
#include "tests/common/shm_object.h"

namespace conv1d::e2e {
namespace {

using ::testing::HasSubstr;
using ::conv1d::testing::ShmObject;

constexpr char kAlice[] = "alice-0123456789abcdef";
constexpr char kBob[] = "bob-0123456789abcdef01";
constexpr char kOps[] = "ops-0123456789abcdef01";
constexpr char kNoToken[] = "";
constexpr int64_t kD = 4, kW = 4, kLen = 24;

// Tokens [t0, t0 + n) of a channel-first fp32 x [1, D, L].
v1::Tensor Slice(const v1::Tensor& x, int64_t t0, int64_t n) {
  const int64_t len = x.shape(2);
  v1::Tensor out;
  out.set_dtype(v1::FP32);
  for (int64_t v : {int64_t{1}, kD, n}) out.add_shape(v);
  for (int64_t d = 0; d < kD; ++d) out.mutable_data()->append(x.data(), (d * len + t0) * 4, n * 4);
  return out;
}

std::vector<double> Doubles(const v1::Tensor& t) {
  std::vector<double> out(t.data().size() / 4);
  for (size_t i = 0; i < out.size(); ++i) {
    float f;
    std::memcpy(&f, t.data().data() + 4 * i, 4);
    out[i] = f;
  }
  return out;
}

// One sequence x [1, D, kLen] with its weights and the float64 forward of
// the whole of it, against which every step's y is checked.
struct Sequence {
  explicit Sequence(Rng* rng)
      : x(RandomTensor(DType::kF32, {1, kD, kLen}, rng)),
        weight(RandomTensor(DType::kF32, {kD, kW}, rng)),
        bias(RandomTensor(DType::kF32, {kD}, rng)) {
    ref::Inputs in;
    in.batch = 1;
    in.seqlen = kLen;
    in.dim = kD;
    in.width = kW;
    in.silu = true;
    in.x = Doubles(x);
    in.weight = Doubles(weight);
    in.bias = Doubles(bias);
    want = ref::Forward(in);
  }
  v1::OpenSessionRequest Open() const {
    v1::OpenSessionRequest r;
    *r.mutable_inline_weights()->mutable_weight() = weight;
    *r.mutable_inline_weights()->mutable_bias() = bias;
    r.set_dtype(v1::FP32);
    r.set_activation(v1::ACTIVATION_SILU);
    r.set_batch(1);
    r.set_max_draft_tokens(4);
    return r;
  }
  // y of tokens [t0, t0 + y.shape(2)) against the reference.
  void ExpectY(const v1::Tensor& y, int64_t t0) const {
    ASSERT_EQ(y.shape_size(), 3);
    const int64_t n = y.shape(2);
    const std::vector<double> got = Doubles(y);
    ASSERT_EQ(static_cast<int64_t>(got.size()), kD * n);
    for (int64_t d = 0; d < kD; ++d) {
      for (int64_t s = 0; s < n; ++s) {
        const size_t i = static_cast<size_t>(d * kLen + t0 + s);
        const double w = want.y[i], g = got[static_cast<size_t>(d * n + s)];
        EXPECT_LE(std::fabs(g - w), 1e-5 * (1.0 + want.y_scale[i]))
            << "channel " << d << " token " << t0 + s << ": got " << g << ", want " << w;
      }
    }
  }
  // The state after token t: the last W-1 inputs, exactly.
  std::string StateAfter(int64_t t) const { return Slice(x, t - (kW - 1), kW - 1).data(); }

  v1::Tensor x, weight, bias;
  ref::Outputs want;
};

class OwnershipTest : public ::testing::Test {
 protected:
  // The server, with the token file of alice, bob (infer) and ops (admin)
  // when `auth`.
  void Start(bool auth = true) {
    ServerOptions options;
    options.backend.name = "cpu";
    options.backend.threads = 2;
    if (auth) {
      // One file per process: ctest runs these tests side by side.
      tokens_ = absl::StrCat(::testing::TempDir(), "ownership_test_tokens_", getpid());
      std::ofstream(tokens_, std::ios::trunc) << "# token principal role\n"
                                              << kAlice << " alice infer\n"
                                              << kBob << " bob infer\n"
                                              << kOps << " ops admin\n";
      absl::StatusOr<std::unique_ptr<Authenticator>> a = Authenticator::Create(tokens_);
      ASSERT_TRUE(a.ok()) << a.status();
      options.auth = std::move(*a);
    }
    ASSERT_NO_FATAL_FAILURE(StartTestServer(std::move(options), &ts_));
    oip_ = inference::GRPCInferenceService::NewStub(ts_.channel);
  }
  void TearDown() override {
    if (!tokens_.empty()) std::remove(tokens_.c_str());
  }

  // A call context carrying `token` (none when empty).
  static std::unique_ptr<grpc::ClientContext> As(const std::string& token) {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    if (!token.empty()) ctx->AddMetadata("authorization", absl::StrCat("Bearer ", token));
    return ctx;
  }

  // The session RPCs as `token`.
  grpc::Status Open(const std::string& token, const v1::OpenSessionRequest& req,
                    v1::OpenSessionResponse* resp) {
    return ts_.stub->OpenSession(As(token).get(), req, resp);
  }
  grpc::Status Step(const std::string& token, const std::string& id, const v1::Tensor& x,
                    v1::Tensor* y = nullptr) {
    v1::UpdateRequest req;
    req.set_session_id(id);
    *req.mutable_x() = x;
    v1::UpdateResponse resp;
    grpc::Status s = ts_.stub->Update(As(token).get(), req, &resp);
    if (y != nullptr) *y = resp.y();
    return s;
  }
  grpc::Status Commit(const std::string& token, const std::string& id, int64_t accepted) {
    v1::CommitSessionRequest req;
    req.set_session_id(id);
    req.set_accepted(accepted);
    v1::CommitSessionResponse resp;
    return ts_.stub->CommitSession(As(token).get(), req, &resp);
  }
  grpc::Status Fork(const std::string& token, const std::string& id,
                    std::string* fork = nullptr) {
    v1::ForkSessionRequest req;
    req.set_session_id(id);
    v1::ForkSessionResponse resp;
    grpc::Status s = ts_.stub->ForkSession(As(token).get(), req, &resp);
    if (fork != nullptr) *fork = resp.session_id();
    return s;
  }
  grpc::Status Export(const std::string& token, const std::string& id,
                      std::string* state = nullptr) {
    v1::ExportSessionRequest req;
    req.set_session_id(id);
    v1::ExportSessionResponse resp;
    grpc::Status s = ts_.stub->ExportSession(As(token).get(), req, &resp);
    if (state != nullptr) *state = resp.conv_state().data();
    return s;
  }
  grpc::Status Close(const std::string& token, const std::string& id) {
    v1::CloseSessionRequest req;
    req.set_session_id(id);
    v1::CloseSessionResponse resp;
    return ts_.stub->CloseSession(As(token).get(), req, &resp);
  }
  // A Decode stream that takes session `id` over, then ends (which closes
  // the session when the take-over succeeded); the stream's status.
  grpc::Status TakeOver(const std::string& token, const std::string& id) {
    std::unique_ptr<grpc::ClientContext> ctx = As(token);
    auto stream = ts_.stub->Decode(ctx.get());
    v1::DecodeRequest req;
    req.mutable_open()->set_session_id(id);
    v1::DecodeResponse resp;
    if (stream->Write(req) && stream->Read(&resp)) stream->WritesDone();
    while (stream->Read(&resp)) {
    }
    return stream->Finish();
  }

  // The calls that use a session rather than close it, as `token` on `id`;
  // `x` is a valid step for the session.
  std::vector<std::pair<std::string, std::function<grpc::Status(const std::string&)>>> Uses(
      const std::string& token, const v1::Tensor& x) {
    return {
        {"Update", [this, token, x](const std::string& id) { return Step(token, id, x); }},
        {"CommitSession", [this, token](const std::string& id) { return Commit(token, id, 1); }},
        {"ForkSession", [this, token](const std::string& id) { return Fork(token, id); }},
        {"ExportSession", [this, token](const std::string& id) { return Export(token, id); }},
        {"Decode take-over",
         [this, token](const std::string& id) { return TakeOver(token, id); }},
    };
  }

  // The inference protocol's region calls as `token`.
  grpc::Status Register(const std::string& token, const std::string& name,
                        const ShmObject& obj) {
    inference::SystemSharedMemoryRegisterRequest req;
    req.set_name(name);
    req.set_key(obj.key());
    req.set_byte_size(obj.size());
    inference::SystemSharedMemoryRegisterResponse resp;
    return oip_->SystemSharedMemoryRegister(As(token).get(), req, &resp);
  }
  grpc::Status Unregister(const std::string& token, const std::string& name) {
    inference::SystemSharedMemoryUnregisterRequest req;
    req.set_name(name);
    inference::SystemSharedMemoryUnregisterResponse resp;
    return oip_->SystemSharedMemoryUnregister(As(token).get(), req, &resp);
  }
  // Region names listed to `token` for `name` ("" lists all); the status.
  grpc::Status Regions(const std::string& token, const std::string& name,
                       std::vector<std::string>* names) {
    inference::SystemSharedMemoryStatusRequest req;
    req.set_name(name);
    inference::SystemSharedMemoryStatusResponse resp;
    grpc::Status s = oip_->SystemSharedMemoryStatus(As(token).get(), req, &resp);
    names->clear();
    for (const auto& [n, region] : resp.regions()) names->push_back(n);
    std::sort(names->begin(), names->end());
    return s;
  }

  std::string tokens_;
  TestServer ts_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> oip_;
};

// `hidden` must be word for word the answer for an unknown id or name:
// NOT_FOUND, naming `field`, with `unknown`'s message for `bogus` in it.
void ExpectAnsweredAsUnknown(const grpc::Status& hidden, const grpc::Status& unknown,
                             const std::string& real, const std::string& bogus,
                             const std::string& field, const std::string& call) {
  EXPECT_EQ(hidden.error_code(), grpc::StatusCode::NOT_FOUND) << call << ": "
                                                              << hidden.error_message();
  EXPECT_EQ(unknown.error_code(), grpc::StatusCode::NOT_FOUND) << call;
  EXPECT_THAT(hidden.error_message(), HasSubstr(field)) << call;
  EXPECT_EQ(hidden.error_message(),
            absl::StrReplaceAll(unknown.error_message(), {{bogus, real}}))
      << call;
}

TEST_F(OwnershipTest, AnotherInferPrincipalFindsNoSessionAndLeavesItAsItWas) {
  CONV1D_TEST_SEED_SCOPE(seed, 71);
  Rng rng(seed);
  ASSERT_NO_FATAL_FAILURE(Start());
  const Sequence seq(&rng);

  v1::OpenSessionRequest open = seq.Open();
  *open.mutable_prefill() = Slice(seq.x, 0, 6);
  v1::OpenSessionResponse opened;
  ASSERT_TRUE(Open(kAlice, open, &opened).ok());
  const std::string id = opened.session_id();
  seq.ExpectY(opened.y(), 0);
  v1::Tensor y;
  ASSERT_TRUE(Step(kAlice, id, Slice(seq.x, 6, 3), &y).ok());
  seq.ExpectY(y, 6);

  // Bob knows the id. Each call would change, copy, read or end alice's
  // session; each is answered as for an id that was never handed out.
  const std::string bogus = "s00000000000000000";
  const v1::Tensor junk = RandomTensor(DType::kF32, {1, kD, 2}, &rng);
  auto calls = Uses(kBob, junk);
  calls.push_back({"CloseSession", [&](const std::string& s) { return Close(kBob, s); }});
  for (const auto& [name, call] : calls) {
    ExpectAnsweredAsUnknown(call(id), call(bogus), id, bogus, "session_id", name);
  }

  // Alice's last step is still the one to commit (bob's rollback did not
  // happen), and the session goes on as if bob had never called.
  ASSERT_TRUE(Commit(kAlice, id, 3).ok());
  for (int64_t t = 9; t < kLen; t += 5) {
    const int64_t n = std::min<int64_t>(5, kLen - t);
    ASSERT_TRUE(Step(kAlice, id, Slice(seq.x, t, n), &y).ok());
    seq.ExpectY(y, t);
  }
  std::string state;
  ASSERT_TRUE(Export(kAlice, id, &state).ok());
  EXPECT_EQ(state, seq.StateAfter(kLen));
  std::string fork;
  ASSERT_TRUE(Fork(kAlice, id, &fork).ok());
  // A fork belongs to its source's owner.
  EXPECT_EQ(Export(kBob, fork).error_code(), grpc::StatusCode::NOT_FOUND);
  ASSERT_TRUE(Export(kAlice, fork, &state).ok());
  EXPECT_EQ(state, seq.StateAfter(kLen));
  EXPECT_TRUE(Close(kAlice, fork).ok());
  EXPECT_TRUE(Close(kAlice, id).ok());
  EXPECT_EQ(ts_.server->sessions()->open_sessions(), 0);
}

TEST_F(OwnershipTest, AnAdminMayCloseAnothersSessionButNotUseIt) {
  CONV1D_TEST_SEED_SCOPE(seed, 72);
  Rng rng(seed);
  ASSERT_NO_FATAL_FAILURE(Start());
  const Sequence seq(&rng);
  v1::OpenSessionResponse opened;
  ASSERT_TRUE(Open(kAlice, seq.Open(), &opened).ok());
  const std::string id = opened.session_id();
  v1::Tensor y;
  ASSERT_TRUE(Step(kAlice, id, Slice(seq.x, 0, 4), &y).ok());
  seq.ExpectY(y, 0);

  const v1::Tensor junk = RandomTensor(DType::kF32, {1, kD, 2}, &rng);
  for (const auto& [name, call] : Uses(kOps, junk)) {
    const grpc::Status s = call(id);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << name << ": "
                                                                  << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr("session_id")) << name;
  }
  // Untouched: the commit window and the state are alice's as she left them.
  ASSERT_TRUE(Commit(kAlice, id, 4).ok());
  ASSERT_TRUE(Step(kAlice, id, Slice(seq.x, 4, kLen - 4), &y).ok());
  seq.ExpectY(y, 4);
  std::string state;
  ASSERT_TRUE(Export(kAlice, id, &state).ok());
  EXPECT_EQ(state, seq.StateAfter(kLen));

  // The admin's own sessions are its own; alice's it may close.
  v1::OpenSessionResponse own;
  ASSERT_TRUE(Open(kOps, seq.Open(), &own).ok());
  ASSERT_TRUE(Step(kOps, own.session_id(), Slice(seq.x, 0, kLen), &y).ok());
  seq.ExpectY(y, 0);
  EXPECT_EQ(Export(kAlice, own.session_id()).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(Close(kOps, own.session_id()).ok());
  EXPECT_TRUE(Close(kOps, id).ok());
  const grpc::Status gone = Step(kAlice, id, Slice(seq.x, 0, 1));
  EXPECT_EQ(gone.error_code(), grpc::StatusCode::NOT_FOUND) << gone.error_message();
  EXPECT_EQ(ts_.server->sessions()->open_sessions(), 0);
}

TEST_F(OwnershipTest, ASessionOpensOnlyWithWeightsTheOpenerMayUse) {
  CONV1D_TEST_SEED_SCOPE(seed, 73);
  Rng rng(seed);
  ASSERT_NO_FATAL_FAILURE(Start());
  const Sequence seq(&rng);
  v1::RegisterWeightsRequest reg;
  reg.set_name("alice-w");
  *reg.mutable_weight() = seq.weight;
  *reg.mutable_bias() = seq.bias;
  v1::RegisterWeightsResponse registered;
  ASSERT_TRUE(ts_.stub->RegisterWeights(As(kAlice).get(), reg, &registered).ok());
  v1::OpenSessionRequest open = seq.Open();
  open.set_weights_name("alice-w");

  v1::OpenSessionResponse opened;
  grpc::Status s = Open(kBob, open, &opened);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("weights_name"));
  {
    std::unique_ptr<grpc::ClientContext> ctx = As(kBob);
    auto stream = ts_.stub->Decode(ctx.get());
    v1::DecodeRequest req;
    *req.mutable_open() = open;
    v1::DecodeResponse resp;
    EXPECT_FALSE(stream->Write(req) && stream->Read(&resp));
    s = stream->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr("open.weights_name"));
  }
  EXPECT_EQ(ts_.server->sessions()->open_sessions(), 0);

  ASSERT_TRUE(Open(kAlice, open, &opened).ok());
  v1::Tensor y;
  ASSERT_TRUE(Step(kAlice, opened.session_id(), seq.x, &y).ok());
  seq.ExpectY(y, 0);
  EXPECT_TRUE(Close(kAlice, opened.session_id()).ok());
}

TEST_F(OwnershipTest, RegionsServeListAndUnregisterOnlyForTheirRegistrant) {
  ASSERT_NO_FATAL_FAILURE(Start());
  Rng rng(74);
  Case c;  // fp32 forward, D=8, W=4, inline weights
  const Inputs in = MakeInputs(c, &rng), other = MakeInputs(c, &rng);
  const int64_t x_bytes = static_cast<int64_t>(in.x.data().size());
  const int64_t y_offset = 32768;
  ShmObject a_obj(1 << 16), b_obj(1 << 16);
  ASSERT_TRUE(Register(kAlice, "alice-io", a_obj).ok());
  ASSERT_TRUE(Register(kBob, "bob-io", b_obj).ok());
  std::memcpy(a_obj.data(), in.x.data().data(), x_bytes);

  // Alice reads x from her region and has y written there.
  v1::ForwardRequest mine = MakeForward(c, in);
  mine.mutable_x()->clear_data();
  mine.mutable_x()->mutable_shared_memory()->set_region("alice-io");
  (*mine.mutable_output_shared_memory())["y"].set_region("alice-io");
  (*mine.mutable_output_shared_memory())["y"].set_offset(y_offset);
  v1::ForwardResponse resp;
  grpc::Status s = ts_.stub->Forward(As(kAlice).get(), mine, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  resp.mutable_y()->set_data(a_obj.data() + y_offset, x_bytes);
  EXPECT_EQ(CheckForward(c, in, resp), "");
  const std::string alice_y(a_obj.data() + y_offset, x_bytes);

  // Bob can neither read alice's region nor write his y (of other inputs)
  // into it, by either protocol; her region is answered as one never
  // registered.
  auto forward_as_bob = [&](const std::string& region, bool input) {
    v1::ForwardRequest req = MakeForward(c, other);
    if (input) {
      req.mutable_x()->clear_data();
      req.mutable_x()->mutable_shared_memory()->set_region(region);
    } else {
      (*req.mutable_output_shared_memory())["y"].set_region(region);
      (*req.mutable_output_shared_memory())["y"].set_offset(y_offset);
    }
    v1::ForwardResponse r;
    return ts_.stub->Forward(As(kBob).get(), req, &r);
  };
  ExpectAnsweredAsUnknown(forward_as_bob("alice-io", true), forward_as_bob("nowhere", true),
                          "alice-io", "nowhere", "x: ", "Forward x");
  ExpectAnsweredAsUnknown(forward_as_bob("alice-io", false), forward_as_bob("nowhere", false),
                          "alice-io", "nowhere", "output_shared_memory[\"y\"]", "Forward y");
  EXPECT_EQ(std::string(a_obj.data() + y_offset, x_bytes), alice_y);
  auto infer_as_bob = [&](const std::string& region) {
    inference::ModelInferRequest req;
    req.set_model_name("conv1d_forward");
    auto* x = req.add_inputs();
    x->set_name("x");
    x->set_datatype("FP32");
    x->mutable_shape()->Assign(in.x.shape().begin(), in.x.shape().end());
    (*x->mutable_parameters())["shared_memory_region"].set_string_param(region);
    (*x->mutable_parameters())["shared_memory_byte_size"].set_int64_param(x_bytes);
    auto* w = req.add_inputs();
    w->set_name("weight");
    w->set_datatype("FP32");
    w->mutable_shape()->Assign(in.weight.shape().begin(), in.weight.shape().end());
    w->mutable_contents()->mutable_fp32_contents()->Resize(
        static_cast<int>(in.weight.data().size() / 4), 0.5f);
    inference::ModelInferResponse r;
    return oip_->ModelInfer(As(kBob).get(), req, &r);
  };
  ExpectAnsweredAsUnknown(infer_as_bob("alice-io"), infer_as_bob("nowhere"), "alice-io",
                          "nowhere", "input 'x'", "ModelInfer x");

  // Bob lists his own region only, cannot see, unregister or take over
  // alice's name, and unregistering "all" releases only his.
  std::vector<std::string> names;
  ASSERT_TRUE(Regions(kBob, "", &names).ok());
  EXPECT_EQ(names, std::vector<std::string>{"bob-io"});
  ExpectAnsweredAsUnknown(Regions(kBob, "alice-io", &names), Regions(kBob, "nowhere", &names),
                          "alice-io", "nowhere", "name: ", "SystemSharedMemoryStatus");
  ExpectAnsweredAsUnknown(Unregister(kBob, "alice-io"), Unregister(kBob, "nowhere"),
                          "alice-io", "nowhere", "name: ", "SystemSharedMemoryUnregister");
  EXPECT_EQ(Register(kBob, "alice-io", b_obj).error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_TRUE(Unregister(kBob, "").ok());
  ASSERT_TRUE(Regions(kAlice, "", &names).ok());
  EXPECT_EQ(names, std::vector<std::string>{"alice-io"});

  // The admin lists every region and may unregister any by name, but
  // cannot read or write another's, and "all" means its own.
  ASSERT_TRUE(Register(kBob, "bob-io", b_obj).ok());
  ASSERT_TRUE(Regions(kOps, "", &names).ok());
  EXPECT_EQ(names, (std::vector<std::string>{"alice-io", "bob-io"}));
  v1::ForwardRequest as_ops = mine;
  as_ops.clear_output_shared_memory();
  s = ts_.stub->Forward(As(kOps).get(), as_ops, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("x: "));
  EXPECT_TRUE(Unregister(kOps, "").ok());
  ASSERT_TRUE(Regions(kOps, "", &names).ok());
  EXPECT_EQ(names, (std::vector<std::string>{"alice-io", "bob-io"}));
  EXPECT_TRUE(Unregister(kOps, "bob-io").ok());
  EXPECT_EQ(Regions(kBob, "bob-io", &names).error_code(), grpc::StatusCode::NOT_FOUND);

  // Alice's region still works for her.
  s = ts_.stub->Forward(As(kAlice).get(), mine, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(Unregister(kAlice, "alice-io").ok());
}

TEST_F(OwnershipTest, WithoutATokenFileEveryCallerSharesSessionsAndRegions) {
  CONV1D_TEST_SEED_SCOPE(seed, 75);
  Rng rng(seed);
  ASSERT_NO_FATAL_FAILURE(Start(/*auth=*/false));
  const Sequence seq(&rng);
  // Two clients, neither with a token: one opens, the other does the rest.
  v1::OpenSessionResponse opened;
  ASSERT_TRUE(Open(kNoToken, seq.Open(), &opened).ok());
  const std::string id = opened.session_id();
  v1::Tensor y;
  ASSERT_TRUE(Step(kNoToken, id, Slice(seq.x, 0, 5), &y).ok());
  seq.ExpectY(y, 0);
  EXPECT_TRUE(Commit(kNoToken, id, 5).ok());
  std::string fork, state;
  ASSERT_TRUE(Fork(kNoToken, id, &fork).ok());
  ASSERT_TRUE(Export(kNoToken, fork, &state).ok());
  EXPECT_EQ(state, seq.StateAfter(5));
  EXPECT_TRUE(TakeOver(kNoToken, fork).ok());  // the stream's end closes it
  EXPECT_TRUE(Close(kNoToken, id).ok());
  EXPECT_EQ(ts_.server->sessions()->open_sessions(), 0);

  ShmObject obj(4096);
  ASSERT_TRUE(Register(kNoToken, "io", obj).ok());
  std::vector<std::string> names;
  ASSERT_TRUE(Regions(kNoToken, "", &names).ok());
  EXPECT_EQ(names, std::vector<std::string>{"io"});
  EXPECT_TRUE(Unregister(kNoToken, "").ok());
  EXPECT_EQ(Regions(kNoToken, "io", &names).error_code(), grpc::StatusCode::NOT_FOUND);
}

}  // namespace
}  // namespace conv1d::e2e
