// Helpers for the end-to-end suites: an in-process Server on a loopback port,
// channels and raw-byte calls, random test cases with their wire requests,
// and a check of each response against CpuConvSegment run locally on the
// same inputs.
//
// Used by tests/e2e and tests/frontend. Test cases and requests are plain values; helpers
// are thread-safe as long as each thread uses its own Rng.
#ifndef CONV1D_TESTS_E2E_E2E_UTIL_H_
#define CONV1D_TESTS_E2E_E2E_UTIL_H_

#include <cstdint>
#include <memory>
#include <random>
#include <string>

#include "absl/time/time.h"
#include "conv1d/v1/conv1d.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "server/core/conv_problem.h"
#include "server/frontend/server.h"

namespace conv1d::e2e {

using Rng = std::mt19937_64;

// An in-process server on 127.0.0.1:0 with metrics off (unless an observer
// is given) and the given drain grace, plus a stub connected to it.
struct TestServer {
  std::unique_ptr<Server> server;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Conv1d::Stub> stub;
};
// The compute backend the suites run against: $CONV1D_E2E_BACKEND when set
// (e.g. "gpu" on a GPU host), else "cpu".
std::string BackendUnderTest();

// Fails the calling test (ASSERT) when the server cannot start.
void StartTestServer(ServerOptions options, TestServer* out,
                     absl::Duration drain_grace = absl::ZeroDuration());

// A channel to 127.0.0.1:port (or "host:port" when given) accepting 1 GiB
// messages; each call makes a new connection when `fresh` is true.
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target,
                                           bool fresh = false);

// Sends `request` bytes to `method` ("/pkg.Service/Method") as they are.
grpc::Status RawUnaryCall(grpc::Channel* channel, const std::string& method,
                          const std::string& request, std::string* response,
                          absl::Duration timeout = absl::Seconds(10));

// grpc.health.v1 Check of `service` ("" = the whole server): 1 SERVING,
// 2 NOT_SERVING, 0 UNKNOWN; -1 when the call itself failed. The default
// timeout allows for a loaded machine; a server that is not listening fails
// the call at once.
int HealthCheck(grpc::Channel* channel, const std::string& service = "",
                absl::Duration timeout = absl::Seconds(10));

// One request, described independently of the server's validation.
struct Case {
  Op op = Op::kForward;
  DType x_dtype = DType::kF32;
  DType w_dtype = DType::kF32;
  bool grad_fp32 = false;
  int64_t batch = 1, dim = 8, seqlen = 16, width = 4;
  int64_t state_len = 3;  // update: conv_state columns
  Layout layout = Layout::kChannelFirst;
  Activation act = Activation::kNone;
  bool bias = false;
  bool initial_states = false;     // forward, backward
  bool final_states = false;       // forward: return_final_states
  bool dfinal_states = false;      // backward
  bool dinitial_states = false;    // backward: return_dinitial_states
  std::string weights_name;        // non-empty: registered under this name
  std::string DebugString() const;
};

// Random (never zero) values rounded to `dtype`, as a wire tensor.
v1::Tensor RandomTensor(DType dtype, std::initializer_list<int64_t> shape, Rng* rng);

// Fresh random inputs for `c`. Weights go inline unless c.weights_name is
// set; then *register_request is filled (and must be sent first).
struct Inputs {
  v1::Tensor x, dout, weight, bias, initial_states, dfinal_states, conv_state;
};
Inputs MakeInputs(const Case& c, Rng* rng);
v1::RegisterWeightsRequest MakeRegisterRequest(const Case& c, const Inputs& in,
                                               bool replace);
v1::ForwardRequest MakeForward(const Case& c, const Inputs& in);
v1::BackwardRequest MakeBackward(const Case& c, const Inputs& in);
v1::UpdateRequest MakeUpdate(const Case& c, const Inputs& in);

// Computes `c` on `in` with CpuConvSegment and compares every output of the
// response (dtype, shape, values within a dtype-dependent tolerance).
// Returns an empty string when everything matches, else what differs.
std::string CheckForward(const Case& c, const Inputs& in, const v1::ForwardResponse& r);
std::string CheckBackward(const Case& c, const Inputs& in, const v1::BackwardResponse& r);
std::string CheckUpdate(const Case& c, const Inputs& in, const v1::UpdateResponse& r);

// A random case: every op, dtype pair, layout, activation, width 1..256,
// optional bias and states.
Case RandomCase(Op op, Rng* rng);

}  // namespace conv1d::e2e

#endif  // CONV1D_TESTS_E2E_E2E_UTIL_H_
