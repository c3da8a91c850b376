// conv1d_client: the command-line client of conv1d-serve.
//
//   conv1d_client [flags] <command>
//   commands: health info describe register unregister list forward backward update
//             decode
//
// Inputs are seeded random tensors or .npy files (fp32 '<f4', fp16 '<f2',
// bf16 as raw bits '<u2'); outputs can be written as .npy. `--verify`
// recomputes the answer with the local CPU implementation and exits 1 on a
// mismatch. `health` exits 0 only when the server reports SERVING, so it can
// serve as a container health check. `describe` prints the server's services,
// methods and messages by server reflection.
//
// Exit status: 0 ok; 1 a failure at run time (an RPC failed, health is not
// SERVING, a wrong answer under --verify); 2 bad usage (an unknown command or
// flag, a bad value), reported before anything is allocated or sent.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "client/cli/decode_command.h"
#include "client/cli/describe.h"
#include "client/conv1d_client.h"
#include "client/npy.h"
#include "client/security_flags.h"
#include "client/verify.h"
#include "client/workload.h"
#include "server/util/command_line.h"
#include "server/util/program_errors.h"

ABSL_FLAG(std::string, target, "localhost:50051", "Server address host:port (comma list: round-robin).");
ABSL_FLAG(int, listen_of_pid, 0,
          "Instead of --target: the address of the conv1d_server running as this process id, "
          "from its --listen flag (default port 50051; a wildcard host becomes 127.0.0.1). "
          "A container's HEALTHCHECK uses --listen_of_pid=1, so it follows the server's port.");
ABSL_FLAG(double, timeout_s, 60, "Deadline of each call, retries included.");
ABSL_FLAG(int, attempts, 4, "Attempts per call (retries on UNAVAILABLE/RESOURCE_EXHAUSTED); 1 = none.");
ABSL_FLAG(std::string, service, "", "health: service name to ask about ('' = whole server). "
          "describe: a service, method or message to describe ('' = every service).");
ABSL_FLAG(int64_t, max_message_bytes, int64_t{1} << 30,
          "Largest gRPC message sent or received; a request or answer of a bigger --shape "
          "is refused before anything is allocated.");
ABSL_FLAG(std::string, preset, "", "Start from a workload preset: decode-fwd, decode-update, small-fwd, large-fwd, large-bwd.");
ABSL_FLAG(std::string, shape, "", "Activation shape BxDxL (B, channels D, length L; S new tokens for update).");
ABSL_FLAG(std::string, dtype, "", "Activation dtype: fp32, fp16, bf16 (default fp32).");
ABSL_FLAG(std::string, weight_dtype, "", "Weight/bias dtype (default: the activation dtype).");
ABSL_FLAG(std::optional<int>, width, std::nullopt, "Kernel width W >= 1 (default 4).");
ABSL_FLAG(std::string, layout, "", "cf (channel-first [B,D,L], default) or cl ([B,L,D]).");
ABSL_FLAG(std::string, activation, "", "silu (default) or none.");
ABSL_FLAG(std::string, bias, "", "Use a bias: true (default) or false.");
ABSL_FLAG(bool, initial_states, false, "forward/backward: send random initial_states [B,D,W-1].");
ABSL_FLAG(bool, final_states, false, "forward: ask for final_states.");
ABSL_FLAG(bool, dfinal_states, false, "backward: send random dfinal_states.");
ABSL_FLAG(bool, dinitial_states, false, "backward: ask for dinitial_states.");
ABSL_FLAG(bool, grad_fp32, false, "backward: dweight/dbias in fp32.");
ABSL_FLAG(std::optional<int64_t>, state_len, std::nullopt,
          "update: conv_state length K >= max(W-1, 1) (default W-1).");
ABSL_FLAG(std::string, weights_name, "", "Use (or for register/unregister: name) a registered weight set.");
ABSL_FLAG(bool, replace, false, "register: replace an existing set of the same name.");
ABSL_FLAG(uint64_t, seed, 1, "Seed of random inputs; weights come from this seed too, so "
          "'register --seed=S' and 'forward --weights_name=N --seed=S --verify' agree.");
ABSL_FLAG(std::string, x_file, "", "x from a .npy file (its shape sets B, D, L).");
ABSL_FLAG(std::string, dout_file, "", "backward: dout from a .npy file.");
ABSL_FLAG(std::string, weight_file, "", "weight [D,W] from a .npy file.");
ABSL_FLAG(std::string, bias_file, "", "bias [D] from a .npy file.");
ABSL_FLAG(std::string, state_file, "", "initial_states (forward/backward) or conv_state (update) from .npy.");
ABSL_FLAG(std::string, out_prefix, "", "Write every output tensor to <prefix><name>.npy.");
ABSL_FLAG(bool, verify, false, "Compare the answer with the local CPU implementation; exit 1 on mismatch.");
ABSL_FLAG(int, step_tokens, 1, "decode: tokens per step of the session (the last step may be shorter).");
ABSL_FLAG(int, repeat, 1, "Send the request this many times (1 ... 1000000) and report the best "
          "and median time.");

namespace conv1d {
namespace {

constexpr const char* kCommands[] = {"health",     "info", "describe", "register",
                                     "unregister", "list", "forward",  "backward",
                                     "update",     "decode"};

// Fail: a failure at run time (the call was made), exit 1; UsageError: bad
// usage, found before anything was sent, exit 2.
constexpr ProgramErrors kErrors{"conv1d_client", /*fail_status=*/1};

absl::StatusOr<WorkloadSpec> SpecFromFlags() {
  WorkloadSpec spec;
  auto apply = [&](const char* key, const std::string& v) -> absl::Status {
    return v.empty() ? absl::OkStatus() : ApplyWorkloadKey(key, v, &spec);
  };
  absl::Status s;
  if (!(s = apply("preset", absl::GetFlag(FLAGS_preset))).ok()) return s;
  if (absl::GetFlag(FLAGS_preset).empty()) spec.bias = true;
  if (!(s = apply("shape", absl::GetFlag(FLAGS_shape))).ok()) return s;
  if (!(s = apply("dtype", absl::GetFlag(FLAGS_dtype))).ok()) return s;
  spec.weight_dtype = spec.dtype;
  if (!(s = apply("weight_dtype", absl::GetFlag(FLAGS_weight_dtype))).ok()) return s;
  if (absl::GetFlag(FLAGS_width).has_value()) {
    if (!(s = apply("width", absl::StrCat(*absl::GetFlag(FLAGS_width)))).ok()) return s;
  }
  if (!(s = apply("layout", absl::GetFlag(FLAGS_layout))).ok()) return s;
  if (!(s = apply("activation", absl::GetFlag(FLAGS_activation))).ok()) return s;
  if (!(s = apply("bias", absl::GetFlag(FLAGS_bias))).ok()) return s;
  spec.initial_states |= absl::GetFlag(FLAGS_initial_states);
  spec.return_final_states |= absl::GetFlag(FLAGS_final_states);
  spec.dfinal_states |= absl::GetFlag(FLAGS_dfinal_states);
  spec.return_dinitial_states |= absl::GetFlag(FLAGS_dinitial_states);
  spec.grad_weight_fp32 |= absl::GetFlag(FLAGS_grad_fp32);
  if (absl::GetFlag(FLAGS_state_len).has_value()) {
    const int64_t k = *absl::GetFlag(FLAGS_state_len);
    if (k < std::max<int64_t>(spec.width - 1, 1)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "state_len: ", k, " is shorter than max(W-1, 1) = ", std::max(spec.width - 1, 1)));
    }
    spec.state_len = k;
  }
  spec.weights_name = absl::GetFlag(FLAGS_weights_name);
  spec.registered_weights = !spec.weights_name.empty();
  if (!absl::GetFlag(FLAGS_state_file).empty() && spec.op != WorkloadOp::kUpdate) {
    spec.initial_states = true;
  }
  return spec;
}

absl::StatusOr<HostTensor> ReadAs(const std::string& path, DType dtype) {
  absl::StatusOr<HostTensor> t = ReadNpyFile(path);
  if (!t.ok()) {
    return absl::Status(t.status().code(),
                        absl::StrCat("reading ", path, ": ", t.status().message()));
  }
  return t->CastTo(dtype);
}

// Weights from files when given, else generated from the seed.
absl::StatusOr<WeightSet> WeightsFromFlags(WorkloadSpec& spec) {
  WeightSet w = MakeWeights(spec, absl::GetFlag(FLAGS_seed));
  if (!absl::GetFlag(FLAGS_weight_file).empty()) {
    absl::StatusOr<HostTensor> t = ReadAs(absl::GetFlag(FLAGS_weight_file), spec.weight_dtype);
    if (!t.ok()) return t.status();
    if (t->shape.size() != 2) return absl::InvalidArgumentError("weight file must be [D, W]");
    spec.dim = t->shape[0];
    spec.width = static_cast<int32_t>(t->shape[1]);
    w.weight = *std::move(t);
    if (spec.bias && absl::GetFlag(FLAGS_bias_file).empty()) {
      w.bias = MakeWeights(spec, absl::GetFlag(FLAGS_seed)).bias;
    }
  }
  if (!absl::GetFlag(FLAGS_bias_file).empty()) {
    absl::StatusOr<HostTensor> t = ReadAs(absl::GetFlag(FLAGS_bias_file), spec.weight_dtype);
    if (!t.ok()) return t.status();
    w.bias = *std::move(t);
    spec.bias = true;
  }
  if (!spec.bias) w.bias = HostTensor();
  return w;
}

CallOptions CallOpts() {
  CallOptions o;
  o.timeout = absl::Seconds(absl::GetFlag(FLAGS_timeout_s));
  return o;
}

void PrintTensor(const char* name, const v1::Tensor& t) {
  if (t.data().empty() && t.shape_size() == 0) return;
  absl::StatusOr<HostTensor> h = HostTensor::FromProto(t);
  if (!h.ok()) {
    std::printf("  %-16s <invalid: %s>\n", name, std::string(h.status().message()).c_str());
    return;
  }
  std::printf("  %-16s %-24s checksum %.6g\n", name, h->DebugString().c_str(), h->Checksum());
  const std::string prefix = absl::GetFlag(FLAGS_out_prefix);
  if (!prefix.empty()) {
    absl::Status s = WriteNpyFile(absl::StrCat(prefix, name, ".npy"), *h);
    if (!s.ok()) std::fprintf(stderr, "conv1d_client: %s\n", s.ToString().c_str());
  }
}

// Sends `req` --repeat times through `call` and prints timing.
template <typename Resp, typename Call>
absl::StatusOr<Resp> Timed(Call call) {
  const int n = absl::GetFlag(FLAGS_repeat);
  std::vector<double> ms;
  absl::StatusOr<Resp> last;
  for (int i = 0; i < n; ++i) {
    const absl::Time t0 = absl::Now();
    last = call();
    ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
    if (!last.ok()) return last;
  }
  std::sort(ms.begin(), ms.end());
  std::printf("  time             %.3f ms (best of %d; median %.3f ms)\n", ms.front(), n,
              ms[ms.size() / 2]);
  return last;
}

template <typename Req, typename Resp>
int Finish(const Req& req, const absl::StatusOr<Resp>& resp, const WeightSet& w,
           bool registered) {
  if (!resp.ok()) return kErrors.Fail(resp.status());
  if (!absl::GetFlag(FLAGS_verify)) return 0;
  absl::Status s = VerifyResponse(req, *resp, registered ? &w : nullptr);
  if (!s.ok()) {
    std::printf("  verify           FAILED\n");
    return kErrors.Fail(s);
  }
  std::printf("  verify           OK (CPU reference)\n");
  return 0;
}

// The inputs of forward/backward/update: the spec from the flags and the
// arrays from files, checked before anything else is allocated.
struct OpInputs {
  WorkloadSpec spec;
  HostTensor x_file, dout_file, state_file;
  WeightSet weights;
};

// Everything that can be wrong with the flags of forward/backward/update,
// found before any buffer of the request's size exists: INVALID_ARGUMENT.
absl::StatusOr<OpInputs> PrepareOp(const std::string& command) {
  absl::StatusOr<WorkloadSpec> spec_or = SpecFromFlags();
  if (!spec_or.ok()) return spec_or.status();
  OpInputs in;
  WorkloadSpec& spec = in.spec;
  spec = *spec_or;
  spec.op = command == "forward" || command == "decode" ? WorkloadOp::kForward
            : command == "backward" ? WorkloadOp::kBackward : WorkloadOp::kUpdate;
  const int64_t max_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  // Sizes from the flags first: files only shrink or move them, and a file is
  // read only once the flags' own request fits.
  if (absl::StatusOr<int64_t> b = CheckWorkloadBytes(spec, max_bytes); !b.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--", b.status().message()));
  }
  HostTensor& x_file = in.x_file;
  HostTensor& dout_file = in.dout_file;
  HostTensor& state_file = in.state_file;
  if (!absl::GetFlag(FLAGS_x_file).empty()) {
    absl::StatusOr<HostTensor> t = ReadAs(absl::GetFlag(FLAGS_x_file), spec.dtype);
    if (!t.ok()) return t.status();
    if (t->shape.size() != 3) return absl::InvalidArgumentError("--x_file: x must be 3-d");
    x_file = *std::move(t);
    spec.batch = x_file.shape[0];
    spec.dim = spec.channel_last ? x_file.shape[2] : x_file.shape[1];
    spec.seqlen = spec.channel_last ? x_file.shape[1] : x_file.shape[2];
  }
  for (auto [flag, out] : {std::pair{absl::GetFlag(FLAGS_dout_file), &dout_file},
                           std::pair{absl::GetFlag(FLAGS_state_file), &state_file}}) {
    if (flag.empty()) continue;
    absl::StatusOr<HostTensor> t = ReadAs(flag, spec.dtype);
    if (!t.ok()) return t.status();
    *out = *std::move(t);
  }
  if (!state_file.empty() && spec.op == WorkloadOp::kUpdate && state_file.shape.size() == 3) {
    spec.state_len = state_file.shape[2];
  }
  absl::StatusOr<WeightSet> w = WeightsFromFlags(spec);
  if (!w.ok()) return w.status();
  in.weights = *std::move(w);
  if (absl::StatusOr<int64_t> b = CheckWorkloadBytes(spec, max_bytes); !b.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--", b.status().message()));
  }
  return in;
}

int RunOp(Conv1dClient& client, const std::string& command, OpInputs in) {
  WorkloadSpec& spec = in.spec;
  const HostTensor& x_file = in.x_file;
  const HostTensor& dout_file = in.dout_file;
  const HostTensor& state_file = in.state_file;
  const WeightSet* w = &in.weights;
  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  if (command == "decode") spec.op = WorkloadOp::kForward;
  PreparedRequest p = BuildRequest(spec, *w, seed * 7919 + 17);
  std::printf("%s %s\n", command.c_str(), spec.Describe().c_str());
  if (command == "decode") {
    DecodeCommand d;
    d.whole = *p.forward;
    if (!x_file.empty()) x_file.ToProto(d.whole.mutable_x());
    d.whole.clear_initial_states();
    d.whole.set_return_final_states(false);
    d.step_tokens = absl::GetFlag(FLAGS_step_tokens);
    d.state_len = absl::GetFlag(FLAGS_state_len).value_or(0);
    d.verify = absl::GetFlag(FLAGS_verify);
    d.registered = spec.registered_weights ? &*w : nullptr;
    return RunDecodeCommand(client, d);
  }
  if (spec.op == WorkloadOp::kForward) {
    v1::ForwardRequest req = *p.forward;
    if (!x_file.empty()) x_file.ToProto(req.mutable_x());
    if (!state_file.empty()) state_file.ToProto(req.mutable_initial_states());
    auto resp = Timed<v1::ForwardResponse>([&] { return client.Forward(req, CallOpts()); });
    if (resp.ok()) {
      PrintTensor("y", resp->y());
      PrintTensor("final_states", resp->final_states());
    }
    return Finish(req, resp, *w, spec.registered_weights);
  }
  if (spec.op == WorkloadOp::kBackward) {
    v1::BackwardRequest req = *p.backward;
    if (!x_file.empty()) x_file.ToProto(req.mutable_x());
    if (!dout_file.empty()) dout_file.ToProto(req.mutable_dout());
    if (!state_file.empty()) state_file.ToProto(req.mutable_initial_states());
    auto resp = Timed<v1::BackwardResponse>([&] { return client.Backward(req, CallOpts()); });
    if (resp.ok()) {
      PrintTensor("dx", resp->dx());
      PrintTensor("dweight", resp->dweight());
      PrintTensor("dbias", resp->dbias());
      PrintTensor("dinitial_states", resp->dinitial_states());
    }
    return Finish(req, resp, *w, spec.registered_weights);
  }
  v1::UpdateRequest req = *p.update;
  if (!x_file.empty()) x_file.ToProto(req.mutable_x());
  if (!state_file.empty()) state_file.ToProto(req.mutable_conv_state());
  auto resp = Timed<v1::UpdateResponse>([&] { return client.Update(req, CallOpts()); });
  if (resp.ok()) {
    PrintTensor("y", resp->y());
    PrintTensor("conv_state", resp->conv_state());
  }
  return Finish(req, resp, *w, spec.registered_weights);
}

void PrintWeightsInfo(const v1::WeightsInfo& i) {
  absl::StatusOr<DType> dt = FromWireDType(i.dtype());
  std::printf("%-24s %s D=%lld W=%d%s %lld bytes\n", i.name().c_str(),
              dt.ok() ? DTypeName(*dt) : "?", static_cast<long long>(i.dim()), i.width(),
              i.has_bias() ? " bias" : "", static_cast<long long>(i.bytes()));
}

// The address to reach the conv1d_server of process `pid` on, from its
// command line (/proc/PID/cmdline): --listen=HOST:PORT or --listen HOST:PORT,
// the server's default without one; wildcard hosts become loopback.
absl::StatusOr<std::string> TargetOfPid(int pid) {
  const std::string path = absl::StrCat("/proc/", pid, "/cmdline");
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat("--listen_of_pid: cannot read ", path));
  std::stringstream ss;
  ss << f.rdbuf();
  std::vector<std::string> args = absl::StrSplit(ss.str(), '\0');
  std::string listen = "0.0.0.0:50051";
  for (size_t i = 0; i < args.size(); ++i) {
    absl::string_view a = args[i];
    if (!absl::ConsumePrefix(&a, "--listen") && !absl::ConsumePrefix(&a, "-listen")) continue;
    if (absl::ConsumePrefix(&a, "=")) {
      listen = std::string(a);
    } else if (a.empty() && i + 1 < args.size()) {
      listen = args[i + 1];
    }
  }
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("--listen_of_pid: the server's --listen '", listen, "' has no port"));
  }
  std::string host = listen.substr(0, colon);
  const std::string port = listen.substr(colon + 1);
  if (port == "0") {
    return absl::InvalidArgumentError(
        "--listen_of_pid: the server listens on port 0 (a free port); use --target");
  }
  if (host.empty() || host == "0.0.0.0") host = "127.0.0.1";
  if (host == "[::]") host = "[::1]";
  return absl::StrCat(host, ":", port);
}

// Checks of the flags every command shares; INVALID_ARGUMENT names the flag.
absl::Status CheckCommonFlags() {
  const double timeout_s = absl::GetFlag(FLAGS_timeout_s);
  if (!(timeout_s > 0) || timeout_s > 1e7) {
    return absl::InvalidArgumentError(
        absl::StrCat("--timeout_s: ", timeout_s, " is not in (0, 1e7] seconds"));
  }
  const int attempts = absl::GetFlag(FLAGS_attempts);
  if (attempts < 1 || attempts > 100) {
    return absl::InvalidArgumentError(
        absl::StrCat("--attempts: ", attempts, " is not in 1 ... 100"));
  }
  const int repeat = absl::GetFlag(FLAGS_repeat);
  if (repeat < 1 || repeat > 1000000) {
    return absl::InvalidArgumentError(
        absl::StrCat("--repeat: ", repeat, " is not in 1 ... 1000000"));
  }
  const int64_t max_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  if (max_bytes < 4096 || max_bytes > (int64_t{1} << 31) - 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_message_bytes: ", max_bytes, " is not in 4096 ... 2147483647"));
  }
  if (absl::GetFlag(FLAGS_target).empty()) {
    return absl::InvalidArgumentError("--target: empty");
  }
  return absl::OkStatus();
}

int Run(const std::string& command) {
  if (std::find(std::begin(kCommands), std::end(kCommands), command) == std::end(kCommands)) {
    return kErrors.UsageError(absl::StrCat("unknown command '", command, "'; commands: ",
                                           absl::StrJoin(kCommands, ", ")));
  }
  if (absl::Status s = CheckCommonFlags(); !s.ok()) return kErrors.UsageError(s.message());
  const std::string name = absl::GetFlag(FLAGS_weights_name);
  if ((command == "unregister" || command == "register") && name.empty()) {
    return kErrors.UsageError(absl::StrCat(command, ": --weights_name is required"));
  }
  // Everything the request needs is checked (and files read) before the
  // client exists, so a bad value never reaches the network.
  std::optional<OpInputs> op_inputs;
  std::optional<WeightSet> register_weights;
  if (command == "forward" || command == "backward" || command == "update" ||
      command == "decode") {
    absl::StatusOr<OpInputs> in = PrepareOp(command);
    if (!in.ok()) return kErrors.UsageError(in.status().message());
    op_inputs = *std::move(in);
  } else if (command == "register") {
    absl::StatusOr<WorkloadSpec> spec = SpecFromFlags();
    if (!spec.ok()) return kErrors.UsageError(spec.status().message());
    WorkloadSpec one = *spec;  // the weights alone: one token of one sequence
    one.batch = one.seqlen = 1;
    one.registered_weights = false;
    one.op = WorkloadOp::kForward;
    absl::StatusOr<int64_t> b = CheckWorkloadBytes(one, absl::GetFlag(FLAGS_max_message_bytes));
    if (!b.ok()) return kErrors.UsageError(absl::StrCat("--", b.status().message()));
    absl::StatusOr<WeightSet> w = WeightsFromFlags(*spec);
    if (!w.ok()) return kErrors.UsageError(w.status().message());
    register_weights = *std::move(w);
  }

  ClientOptions opts;
  opts.targets = SplitTargets(absl::GetFlag(FLAGS_target));
  if (const int pid = absl::GetFlag(FLAGS_listen_of_pid); pid != 0) {
    if (pid < 0) {
      return kErrors.UsageError(absl::StrCat("--listen_of_pid: ", pid, " is not a process id"));
    }
    absl::StatusOr<std::string> target = TargetOfPid(pid);
    if (!target.ok()) return kErrors.UsageError(target.status().message());
    opts.targets = {*target};
  }
  opts.retry.max_attempts = absl::GetFlag(FLAGS_attempts);
  opts.default_timeout = absl::Seconds(absl::GetFlag(FLAGS_timeout_s));
  opts.security = SecurityFromFlags();
  opts.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  absl::StatusOr<std::unique_ptr<Conv1dClient>> client = Conv1dClient::Create(opts);
  if (!client.ok()) {
    return kErrors.UsageError(absl::StrCat("--target: ", client.status().message()));
  }
  Conv1dClient& c = **client;
  if (command == "health") {
    CallOptions o = CallOpts();
    o.max_attempts = 1;
    absl::StatusOr<HealthStatus> h = c.Health(absl::GetFlag(FLAGS_service), o);
    if (!h.ok()) return kErrors.Fail(h.status());
    std::printf("%s\n", HealthStatusName(*h));
    return *h == HealthStatus::kServing ? 0 : 1;
  }
  if (command == "info") {
    absl::StatusOr<v1::ServerInfoResponse> i = c.ServerInfo(CallOpts());
    if (!i.ok()) return kErrors.Fail(i.status());
    std::printf("version            %s\nbackend            %s\ndevices            %s\n"
                "max_width          %d\nmax_request_bytes  %lld\n",
                i->version().c_str(), i->backend().c_str(),
                absl::StrJoin(i->devices(), ", ").c_str(), i->max_width(),
                static_cast<long long>(i->max_request_bytes()));
    return 0;
  }
  if (command == "list") {
    absl::StatusOr<v1::ListWeightsResponse> l = c.ListWeights(CallOpts());
    if (!l.ok()) return kErrors.Fail(l.status());
    for (const auto& i : l->weights()) PrintWeightsInfo(i);
    return 0;
  }
  if (command == "describe") {
    absl::StatusOr<std::string> d =
        DescribeByReflection(c.channel(), absl::GetFlag(FLAGS_service),
                             absl::Seconds(absl::GetFlag(FLAGS_timeout_s)));
    if (!d.ok()) return kErrors.Fail(d.status());
    std::fputs(d->c_str(), stdout);
    return 0;
  }
  if (command == "unregister") {
    v1::UnregisterWeightsRequest req;
    req.set_name(name);
    absl::StatusOr<v1::UnregisterWeightsResponse> r = c.UnregisterWeights(req, CallOpts());
    if (!r.ok()) return kErrors.Fail(r.status());
    std::printf("unregistered %s\n", name.c_str());
    return 0;
  }
  if (command == "register") {
    const WeightSet* w = &*register_weights;
    v1::RegisterWeightsRequest req;
    req.set_name(name);
    req.set_replace(absl::GetFlag(FLAGS_replace));
    w->weight.ToProto(req.mutable_weight());
    if (!w->bias.empty()) w->bias.ToProto(req.mutable_bias());
    absl::StatusOr<v1::RegisterWeightsResponse> r = c.RegisterWeights(req, CallOpts());
    if (!r.ok()) return kErrors.Fail(r.status());
    PrintWeightsInfo(r->info());
    return 0;
  }
  return RunOp(c, command, *std::move(op_inputs));
}

}  // namespace
}  // namespace conv1d

int main(int argc, char** argv) {
  // --help lists this tool's own flags (absl matches by file name otherwise).
  absl::FlagsUsageConfig usage;
  usage.contains_help_flags = [](absl::string_view file) {
    return absl::StrContains(file, "client/cli/") ||
           absl::StrContains(file, "client/security_flags");
  };
  usage.contains_helpshort_flags = usage.contains_help_flags;
  usage.version_string = [] {
    return std::string("conv1d_client " CONV1D_VERSION " (git " CONV1D_GIT_SHA ")\n");
  };
  absl::SetFlagsUsageConfig(usage);
  absl::SetProgramUsageMessage(
      "the command-line client of conv1d-serve.\n"
      "Usage: conv1d_client [flags] <command>\n"
      "  health      prints the serving status; exit 0 only when SERVING\n"
      "  info        version, backend, devices and limits of the server\n"
      "  describe    services, methods and messages, by server reflection\n"
      "              (--service=NAME: one service, method or message)\n"
      "  register    --weights_name=N: keep a weight set on the server\n"
      "  unregister  --weights_name=N\n"
      "  list        registered weight sets\n"
      "  forward | backward | update   one request (--repeat times); --verify checks it\n"
      "  decode      the sequence (--shape BxDxL) through a decode session,\n"
      "              --step_tokens tokens per step; --verify checks it as one forward\n"
      "Exit status: 0 ok; 1 failure at run time (an RPC failed, not SERVING, a wrong\n"
      "answer under --verify); 2 bad usage. .npy bf16 travels as uint16 ('<u2') bits.");
  for (int i = 1; i < argc; ++i) {
    if (absl::string_view(argv[i]) == "-h") {
      // -h is not an absl flag: the same as --help.
      static char help[] = "--help";
      argv[i] = help;
    }
  }
  // Exit 0 after --help and --version, 2 after a malformed flag, as the exit
  // table says.
  std::vector<char*> args = conv1d::ParseFlags(argc, argv);
  if (args.size() < 2) {
    return conv1d::kErrors.UsageError("no command given");
  }
  if (args.size() > 2) {
    return conv1d::kErrors.UsageError(
        absl::StrCat("one command at a time; unexpected '", args[2], "'"));
  }
  return conv1d::Run(args[1]);
}
