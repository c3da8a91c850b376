#include "tests/e2e/e2e_util.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "server/backends/cpu/cpu_conv.h"
#include "server/frontend/validation.h"

namespace conv1d::e2e {

std::string BackendUnderTest() {
  const char* env = std::getenv("CONV1D_E2E_BACKEND");
  return env != nullptr && *env != '\0' ? env : "cpu";
}

void StartTestServer(ServerOptions options, TestServer* out,
                     absl::Duration drain_grace) {
  options.listen_address = "127.0.0.1:0";
  if (options.observer == nullptr) options.metrics_listen_address = "";
  options.drain_grace = drain_grace;
  absl::StatusOr<std::unique_ptr<Server>> server = Server::Create(std::move(options));
  ASSERT_TRUE(server.ok()) << server.status();
  out->server = std::move(*server);
  out->channel = MakeChannel(absl::StrCat("127.0.0.1:", out->server->bound_port()));
  out->stub = v1::Conv1d::NewStub(out->channel);
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target, bool fresh) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(1 << 30);
  args.SetMaxSendMessageSize(1 << 30);
  // Channels with distinct arguments never share a connection.
  static std::atomic<int> counter{0};
  if (fresh) args.SetInt("conv1d.test.channel", counter.fetch_add(1));
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
}

grpc::Status RawUnaryCall(grpc::Channel* channel, const std::string& method,
                          const std::string& request, std::string* response,
                          absl::Duration timeout) {
  grpc::GenericStub stub(std::shared_ptr<grpc::ChannelInterface>(
      channel, [](grpc::ChannelInterface*) {}));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  grpc::Slice slice(request.data(), request.size());
  grpc::ByteBuffer req(&slice, 1), resp;
  grpc::Status status;
  absl::Notification done;
  stub.UnaryCall(&context, method, grpc::StubOptions(), &req, &resp,
                 [&](grpc::Status s) {
                   status = std::move(s);
                   done.Notify();
                 });
  done.WaitForNotification();
  if (status.ok() && response != nullptr) {
    std::vector<grpc::Slice> slices;
    (void)resp.Dump(&slices);
    response->clear();
    for (const grpc::Slice& s : slices) {
      response->append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
  }
  return status;
}

int HealthCheck(grpc::Channel* channel, const std::string& service,
                absl::Duration timeout) {
  // HealthCheckRequest { string service = 1; }, encoded by hand.
  std::string request;
  if (!service.empty()) {
    request.push_back(0x0a);
    request.push_back(static_cast<char>(service.size()));
    request += service;
  }
  std::string response;
  grpc::Status s = RawUnaryCall(channel, "/grpc.health.v1.Health/Check", request,
                                &response, timeout);
  if (!s.ok()) return -1;
  // HealthCheckResponse { ServingStatus status = 1; }: absent means 0.
  if (response.empty()) return 0;
  if (response.size() == 2 && response[0] == 0x08) return response[1];
  return -1;
}

std::string Case::DebugString() const {
  return absl::StrCat(OpName(op), " x=", DTypeName(x_dtype), " w=", DTypeName(w_dtype),
                      " B=", batch, " D=", dim, " L=", seqlen, " W=", width,
                      " K=", state_len, layout == Layout::kChannelLast ? " cl" : " cf",
                      act == Activation::kSiLU ? " silu" : "", bias ? " bias" : "",
                      initial_states ? " init" : "", final_states ? " final" : "",
                      dfinal_states ? " dfinal" : "", dinitial_states ? " dinit" : "",
                      grad_fp32 ? " dw32" : "",
                      weights_name.empty() ? "" : " registered=", weights_name);
}

v1::Tensor RandomTensor(DType dtype, std::initializer_list<int64_t> shape, Rng* rng) {
  v1::Tensor t;
  t.set_dtype(ToWireDType(dtype));
  int64_t n = 1;
  for (int64_t d : shape) {
    t.add_shape(d);
    n *= d;
  }
  std::string* data = t.mutable_data();
  data->resize(static_cast<size_t>(n * DTypeSize(dtype)));
  std::uniform_real_distribution<float> magnitude(0.05f, 1.0f);
  std::bernoulli_distribution negative(0.5);
  for (int64_t i = 0; i < n; ++i) {
    const float v = magnitude(*rng) * (negative(*rng) ? -1.f : 1.f);
    StoreFromFloat(data->data(), dtype, i, v);
  }
  return t;
}

namespace {

int64_t StateCols(const Case& c) { return c.width - 1; }

std::vector<uint8_t> Bytes(const v1::Tensor& t) {
  return std::vector<uint8_t>(t.data().begin(), t.data().end());
}

// Runs `c` on `in` with the CPU implementation.
ConvBuffers Reference(const Case& c, const Inputs& in) {
  const bool states = c.width > 1;
  ConvBuffers b;
  b.key.op = c.op;
  b.key.x_dtype = c.x_dtype;
  b.key.weight_dtype = c.w_dtype;
  b.key.grad_weight_dtype =
      c.op == Op::kBackward ? (c.grad_fp32 ? DType::kF32 : c.w_dtype) : DType::kF32;
  b.key.dim = c.dim;
  b.key.width = static_cast<int32_t>(c.width);
  b.key.activation = c.act;
  b.key.layout = c.layout;
  b.key.has_bias = c.bias;
  b.batch = c.batch;
  b.seqlen = c.seqlen;
  b.x = Bytes(in.x);
  b.weight = Bytes(in.weight);
  if (c.bias) b.bias = Bytes(in.bias);
  if (c.op == Op::kUpdate) {
    b.state_len = c.state_len;
    b.conv_state = Bytes(in.conv_state);
  } else {
    b.key.has_initial_states = c.initial_states && states;
    if (b.key.has_initial_states) b.initial_states = Bytes(in.initial_states);
  }
  if (c.op == Op::kForward) b.key.return_final_states = c.final_states && states;
  if (c.op == Op::kBackward) {
    b.dout = Bytes(in.dout);
    b.key.has_dfinal_states = c.dfinal_states && states;
    if (b.key.has_dfinal_states) b.dfinal_states = Bytes(in.dfinal_states);
    b.key.return_dinitial_states = c.dinitial_states && states;
  }
  absl::Status s = RunCpuConv(&b, nullptr);
  EXPECT_TRUE(s.ok()) << s << " for " << c.DebugString();
  return b;
}

double Tolerance(DType t) {
  switch (t) {
    case DType::kF32: return 1e-5;
    case DType::kF16: return 2e-3;
    case DType::kBF16: return 1.6e-2;
  }
  return 0;
}

// Compares one response tensor with the reference output. `summands` is how
// many products each element sums (B * L for dweight and dbias): the fp32
// accumulation error of a sum grows like the square root of its length, so
// the tolerance of long reductions grows with it (unchanged up to 64 terms).
void Compare(const char* name, const v1::Tensor& got, DType dtype,
             std::vector<int64_t> shape, const std::vector<uint8_t>& want,
             std::string* errors, int64_t summands = 1) {
  if (got.dtype() != ToWireDType(dtype)) {
    absl::StrAppend(errors, name, ": dtype ", got.dtype(), ", want ", DTypeName(dtype), "; ");
    return;
  }
  std::vector<int64_t> got_shape(got.shape().begin(), got.shape().end());
  if (got_shape != shape) {
    absl::StrAppend(errors, name, ": shape [", absl::StrJoin(got_shape, ","), "], want [",
                    absl::StrJoin(shape, ","), "]; ");
    return;
  }
  if (got.data().size() != want.size()) {
    absl::StrAppend(errors, name, ": ", got.data().size(), " bytes, want ", want.size(), "; ");
    return;
  }
  const int64_t n = static_cast<int64_t>(want.size()) / DTypeSize(dtype);
  const double tol =
      Tolerance(dtype) * std::max(1.0, std::sqrt(static_cast<double>(summands) / 64.0));
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double g = LoadAsFloat(got.data().data(), dtype, i);
    const double w = LoadAsFloat(want.data(), dtype, i);
    if (!(std::fabs(g - w) <= tol * (1.0 + std::fabs(w)))) {
      if (bad++ == 0) {
        absl::StrAppend(errors, name, "[", i, "] = ", g, ", want ", w, "; ");
      }
    }
  }
  if (bad > 1) absl::StrAppend(errors, name, ": ", bad, " of ", n, " differ; ");
}

std::vector<int64_t> XShape(const Case& c) {
  return c.layout == Layout::kChannelFirst
             ? std::vector<int64_t>{c.batch, c.dim, c.seqlen}
             : std::vector<int64_t>{c.batch, c.seqlen, c.dim};
}

template <typename Request>
void SetWeights(const Case& c, const Inputs& in, Request* r) {
  if (!c.weights_name.empty()) {
    r->set_weights_name(c.weights_name);
    return;
  }
  *r->mutable_inline_weights()->mutable_weight() = in.weight;
  if (c.bias) *r->mutable_inline_weights()->mutable_bias() = in.bias;
}

void CheckEmptyState(const char* name, const Case& c, const v1::Tensor& t,
                     std::string* errors) {
  Compare(name, t, c.x_dtype, {c.batch, c.dim, 0}, {}, errors);
}

}  // namespace

Inputs MakeInputs(const Case& c, Rng* rng) {
  Inputs in;
  const bool cf = c.layout == Layout::kChannelFirst;
  const int64_t B = c.batch, D = c.dim, L = c.seqlen;
  in.x = cf ? RandomTensor(c.x_dtype, {B, D, L}, rng) : RandomTensor(c.x_dtype, {B, L, D}, rng);
  in.weight = RandomTensor(c.w_dtype, {D, c.width}, rng);
  if (c.bias) in.bias = RandomTensor(c.w_dtype, {D}, rng);
  if (c.op == Op::kBackward) {
    in.dout = cf ? RandomTensor(c.x_dtype, {B, D, L}, rng)
                 : RandomTensor(c.x_dtype, {B, L, D}, rng);
  }
  if (c.initial_states) in.initial_states = RandomTensor(c.x_dtype, {B, D, StateCols(c)}, rng);
  if (c.dfinal_states) in.dfinal_states = RandomTensor(c.x_dtype, {B, D, StateCols(c)}, rng);
  if (c.op == Op::kUpdate) in.conv_state = RandomTensor(c.x_dtype, {B, D, c.state_len}, rng);
  return in;
}

v1::RegisterWeightsRequest MakeRegisterRequest(const Case& c, const Inputs& in,
                                               bool replace) {
  v1::RegisterWeightsRequest r;
  r.set_name(c.weights_name);
  *r.mutable_weight() = in.weight;
  if (c.bias) *r.mutable_bias() = in.bias;
  r.set_replace(replace);
  return r;
}

v1::ForwardRequest MakeForward(const Case& c, const Inputs& in) {
  v1::ForwardRequest r;
  *r.mutable_x() = in.x;
  r.set_layout(c.layout == Layout::kChannelFirst ? v1::LAYOUT_CHANNEL_FIRST
                                                 : v1::LAYOUT_CHANNEL_LAST);
  r.set_activation(c.act == Activation::kSiLU ? v1::ACTIVATION_SILU : v1::ACTIVATION_NONE);
  SetWeights(c, in, &r);
  if (c.initial_states) *r.mutable_initial_states() = in.initial_states;
  r.set_return_final_states(c.final_states);
  return r;
}

v1::BackwardRequest MakeBackward(const Case& c, const Inputs& in) {
  v1::BackwardRequest r;
  *r.mutable_x() = in.x;
  *r.mutable_dout() = in.dout;
  r.set_layout(c.layout == Layout::kChannelFirst ? v1::LAYOUT_CHANNEL_FIRST
                                                 : v1::LAYOUT_CHANNEL_LAST);
  r.set_activation(c.act == Activation::kSiLU ? v1::ACTIVATION_SILU : v1::ACTIVATION_NONE);
  SetWeights(c, in, &r);
  if (c.initial_states) *r.mutable_initial_states() = in.initial_states;
  if (c.dfinal_states) *r.mutable_dfinal_states() = in.dfinal_states;
  r.set_return_dinitial_states(c.dinitial_states);
  r.set_grad_weight_fp32(c.grad_fp32);
  return r;
}

v1::UpdateRequest MakeUpdate(const Case& c, const Inputs& in) {
  v1::UpdateRequest r;
  *r.mutable_x() = in.x;
  *r.mutable_conv_state() = in.conv_state;
  r.set_layout(c.layout == Layout::kChannelFirst ? v1::LAYOUT_CHANNEL_FIRST
                                                 : v1::LAYOUT_CHANNEL_LAST);
  r.set_activation(c.act == Activation::kSiLU ? v1::ACTIVATION_SILU : v1::ACTIVATION_NONE);
  SetWeights(c, in, &r);
  return r;
}

std::string CheckForward(const Case& c, const Inputs& in, const v1::ForwardResponse& r) {
  const ConvBuffers ref = Reference(c, in);
  std::string errors;
  Compare("y", r.y(), c.x_dtype, XShape(c), ref.y, &errors);
  if (c.final_states && c.width > 1) {
    Compare("final_states", r.final_states(), c.x_dtype, {c.batch, c.dim, c.width - 1},
            ref.final_states, &errors);
  } else if (c.final_states) {
    CheckEmptyState("final_states", c, r.final_states(), &errors);
  } else if (r.has_final_states()) {
    absl::StrAppend(&errors, "final_states present but not asked for; ");
  }
  return errors;
}

std::string CheckBackward(const Case& c, const Inputs& in, const v1::BackwardResponse& r) {
  const ConvBuffers ref = Reference(c, in);
  const DType gw = c.grad_fp32 ? DType::kF32 : c.w_dtype;
  std::string errors;
  Compare("dx", r.dx(), c.x_dtype, XShape(c), ref.dx, &errors);
  const int64_t summands = c.batch * c.seqlen;
  Compare("dweight", r.dweight(), gw, {c.dim, c.width}, ref.dweight, &errors, summands);
  if (c.bias) {
    Compare("dbias", r.dbias(), gw, {c.dim}, ref.dbias, &errors, summands);
  } else if (r.has_dbias()) {
    absl::StrAppend(&errors, "dbias present without a bias; ");
  }
  if (c.dinitial_states && c.width > 1) {
    Compare("dinitial_states", r.dinitial_states(), c.x_dtype,
            {c.batch, c.dim, c.width - 1}, ref.dinitial_states, &errors);
  } else if (c.dinitial_states) {
    CheckEmptyState("dinitial_states", c, r.dinitial_states(), &errors);
  }
  return errors;
}

std::string CheckUpdate(const Case& c, const Inputs& in, const v1::UpdateResponse& r) {
  const ConvBuffers ref = Reference(c, in);
  std::string errors;
  Compare("y", r.y(), c.x_dtype, XShape(c), ref.y, &errors);
  Compare("conv_state", r.conv_state(), c.x_dtype, {c.batch, c.dim, c.state_len},
          ref.conv_state_out, &errors);
  return errors;
}

Case RandomCase(Op op, Rng* rng) {
  static constexpr DType kDTypes[] = {DType::kF32, DType::kF16, DType::kBF16};
  static constexpr int64_t kWidths[] = {1, 2, 3, 4, 4, 4, 5, 8, 17, 64, 256};
  static constexpr int64_t kDims[] = {1, 3, 8, 16, 33};
  auto pick = [rng](int64_t n) {
    return std::uniform_int_distribution<int64_t>(0, n - 1)(*rng);
  };
  auto coin = [&pick] { return pick(2) == 1; };
  Case c;
  c.op = op;
  c.x_dtype = kDTypes[pick(3)];
  c.w_dtype = pick(3) == 0 ? kDTypes[pick(3)] : c.x_dtype;
  c.grad_fp32 = coin();
  c.batch = 1 + pick(3);
  c.dim = kDims[pick(5)];
  c.width = kWidths[pick(11)];
  c.seqlen = op == Op::kUpdate ? 1 + pick(4) : 1 + pick(80);
  c.state_len = std::max<int64_t>(1, c.width - 1 + pick(3));
  c.layout = coin() ? Layout::kChannelLast : Layout::kChannelFirst;
  c.act = coin() ? Activation::kSiLU : Activation::kNone;
  c.bias = coin();
  if (op != Op::kUpdate) c.initial_states = coin();
  if (op == Op::kForward) c.final_states = coin();
  if (op == Op::kBackward) {
    c.dfinal_states = coin();
    c.dinitial_states = coin();
  }
  return c;
}

}  // namespace conv1d::e2e
