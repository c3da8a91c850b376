// conv1d_client: the command-line client of conv1d-serve.
//
//   conv1d_client [flags] <command>
//   commands: health info register unregister list forward backward update
//             decode
//
// Inputs are seeded random tensors or .npy files (fp32 '<f4', fp16 '<f2',
// bf16 as raw bits '<u2'); outputs can be written as .npy. `--verify`
// recomputes the answer with the local CPU implementation and exits 1 on a
// mismatch. `health` exits 0 only when the server reports SERVING, so it can
// serve as a container health check.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "client/cli/decode_command.h"
#include "client/conv1d_client.h"
#include "client/npy.h"
#include "client/security_flags.h"
#include "client/verify.h"
#include "client/workload.h"

ABSL_FLAG(std::string, target, "localhost:50051", "Server address host:port (comma list: round-robin).");
ABSL_FLAG(double, timeout_s, 60, "Deadline of each call, retries included.");
ABSL_FLAG(int, attempts, 4, "Attempts per call (retries on UNAVAILABLE/RESOURCE_EXHAUSTED); 1 = none.");
ABSL_FLAG(std::string, service, "", "health: service name to ask about ('' = whole server).");
ABSL_FLAG(std::string, preset, "", "Start from a workload preset: decode-fwd, decode-update, small-fwd, large-fwd, large-bwd.");
ABSL_FLAG(std::string, shape, "", "Activation shape BxDxL (B, channels D, length L; S new tokens for update).");
ABSL_FLAG(std::string, dtype, "", "Activation dtype: fp32, fp16, bf16 (default fp32).");
ABSL_FLAG(std::string, weight_dtype, "", "Weight/bias dtype (default: the activation dtype).");
ABSL_FLAG(int, width, 0, "Kernel width W (default 4).");
ABSL_FLAG(std::string, layout, "", "cf (channel-first [B,D,L], default) or cl ([B,L,D]).");
ABSL_FLAG(std::string, activation, "", "silu (default) or none.");
ABSL_FLAG(std::string, bias, "", "Use a bias: true (default) or false.");
ABSL_FLAG(bool, initial_states, false, "forward/backward: send random initial_states [B,D,W-1].");
ABSL_FLAG(bool, final_states, false, "forward: ask for final_states.");
ABSL_FLAG(bool, dfinal_states, false, "backward: send random dfinal_states.");
ABSL_FLAG(bool, dinitial_states, false, "backward: ask for dinitial_states.");
ABSL_FLAG(bool, grad_fp32, false, "backward: dweight/dbias in fp32.");
ABSL_FLAG(int, state_len, 0, "update: conv_state length K >= W-1 (default W-1).");
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
ABSL_FLAG(int, repeat, 1, "Send the request this many times and report the best and median time.");

namespace conv1d {
namespace {

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "conv1d_client: %s\n", s.ToString().c_str());
  return s.code() == absl::StatusCode::kInternal ? 1 : 2;
}

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
  if (absl::GetFlag(FLAGS_width) > 0) {
    if (!(s = apply("width", absl::StrCat(absl::GetFlag(FLAGS_width)))).ok()) return s;
  }
  if (!(s = apply("layout", absl::GetFlag(FLAGS_layout))).ok()) return s;
  if (!(s = apply("activation", absl::GetFlag(FLAGS_activation))).ok()) return s;
  if (!(s = apply("bias", absl::GetFlag(FLAGS_bias))).ok()) return s;
  spec.initial_states |= absl::GetFlag(FLAGS_initial_states);
  spec.return_final_states |= absl::GetFlag(FLAGS_final_states);
  spec.dfinal_states |= absl::GetFlag(FLAGS_dfinal_states);
  spec.return_dinitial_states |= absl::GetFlag(FLAGS_dinitial_states);
  spec.grad_weight_fp32 |= absl::GetFlag(FLAGS_grad_fp32);
  if (absl::GetFlag(FLAGS_state_len) > 0) spec.state_len = absl::GetFlag(FLAGS_state_len);
  spec.weights_name = absl::GetFlag(FLAGS_weights_name);
  spec.registered_weights = !spec.weights_name.empty();
  if (!absl::GetFlag(FLAGS_state_file).empty() && spec.op != WorkloadOp::kUpdate) {
    spec.initial_states = true;
  }
  return spec;
}

absl::StatusOr<HostTensor> ReadAs(const std::string& path, DType dtype) {
  absl::StatusOr<HostTensor> t = ReadNpyFile(path);
  if (!t.ok()) return t.status();
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
  const int n = std::max(1, absl::GetFlag(FLAGS_repeat));
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
  if (!resp.ok()) return Fail(resp.status());
  if (!absl::GetFlag(FLAGS_verify)) return 0;
  absl::Status s = VerifyResponse(req, *resp, registered ? &w : nullptr);
  if (!s.ok()) {
    std::printf("  verify           FAILED\n");
    return Fail(s);
  }
  std::printf("  verify           OK (CPU reference)\n");
  return 0;
}

int RunOp(Conv1dClient& client, const std::string& command) {
  absl::StatusOr<WorkloadSpec> spec_or = SpecFromFlags();
  if (!spec_or.ok()) return Fail(spec_or.status());
  WorkloadSpec spec = *spec_or;
  spec.op = command == "forward" ? WorkloadOp::kForward
            : command == "backward" ? WorkloadOp::kBackward : WorkloadOp::kUpdate;
  HostTensor x_file, dout_file, state_file;
  if (!absl::GetFlag(FLAGS_x_file).empty()) {
    absl::StatusOr<HostTensor> t = ReadAs(absl::GetFlag(FLAGS_x_file), spec.dtype);
    if (!t.ok()) return Fail(t.status());
    if (t->shape.size() != 3) return Fail(absl::InvalidArgumentError("x file must be 3-d"));
    x_file = *std::move(t);
    spec.batch = x_file.shape[0];
    spec.dim = spec.channel_last ? x_file.shape[2] : x_file.shape[1];
    spec.seqlen = spec.channel_last ? x_file.shape[1] : x_file.shape[2];
  }
  for (auto [flag, out] : {std::pair{absl::GetFlag(FLAGS_dout_file), &dout_file},
                           std::pair{absl::GetFlag(FLAGS_state_file), &state_file}}) {
    if (flag.empty()) continue;
    absl::StatusOr<HostTensor> t = ReadAs(flag, spec.dtype);
    if (!t.ok()) return Fail(t.status());
    *out = *std::move(t);
  }
  if (!state_file.empty() && spec.op == WorkloadOp::kUpdate && state_file.shape.size() == 3) {
    spec.state_len = state_file.shape[2];
  }
  absl::StatusOr<WeightSet> w = WeightsFromFlags(spec);
  if (!w.ok()) return Fail(w.status());
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
    d.state_len = absl::GetFlag(FLAGS_state_len);
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

int Run(const std::string& command) {
  ClientOptions opts;
  opts.targets = SplitTargets(absl::GetFlag(FLAGS_target));
  opts.retry.max_attempts = std::max(1, absl::GetFlag(FLAGS_attempts));
  opts.default_timeout = absl::Seconds(absl::GetFlag(FLAGS_timeout_s));
  opts.security = SecurityFromFlags();
  absl::StatusOr<std::unique_ptr<Conv1dClient>> client = Conv1dClient::Create(opts);
  if (!client.ok()) return Fail(client.status());
  Conv1dClient& c = **client;
  if (command == "health") {
    CallOptions o = CallOpts();
    o.max_attempts = 1;
    absl::StatusOr<HealthStatus> h = c.Health(absl::GetFlag(FLAGS_service), o);
    if (!h.ok()) return Fail(h.status());
    std::printf("%s\n", HealthStatusName(*h));
    return *h == HealthStatus::kServing ? 0 : 1;
  }
  if (command == "info") {
    absl::StatusOr<v1::ServerInfoResponse> i = c.ServerInfo(CallOpts());
    if (!i.ok()) return Fail(i.status());
    std::printf("version            %s\nbackend            %s\ndevices            %s\n"
                "max_width          %d\nmax_request_bytes  %lld\n",
                i->version().c_str(), i->backend().c_str(),
                absl::StrJoin(i->devices(), ", ").c_str(), i->max_width(),
                static_cast<long long>(i->max_request_bytes()));
    return 0;
  }
  if (command == "list") {
    absl::StatusOr<v1::ListWeightsResponse> l = c.ListWeights(CallOpts());
    if (!l.ok()) return Fail(l.status());
    for (const auto& i : l->weights()) PrintWeightsInfo(i);
    return 0;
  }
  const std::string name = absl::GetFlag(FLAGS_weights_name);
  if (command == "unregister" || command == "register") {
    if (name.empty()) return Fail(absl::InvalidArgumentError("--weights_name is required"));
  }
  if (command == "unregister") {
    v1::UnregisterWeightsRequest req;
    req.set_name(name);
    absl::StatusOr<v1::UnregisterWeightsResponse> r = c.UnregisterWeights(req, CallOpts());
    if (!r.ok()) return Fail(r.status());
    std::printf("unregistered %s\n", name.c_str());
    return 0;
  }
  if (command == "register") {
    absl::StatusOr<WorkloadSpec> spec = SpecFromFlags();
    if (!spec.ok()) return Fail(spec.status());
    absl::StatusOr<WeightSet> w = WeightsFromFlags(*spec);
    if (!w.ok()) return Fail(w.status());
    v1::RegisterWeightsRequest req;
    req.set_name(name);
    req.set_replace(absl::GetFlag(FLAGS_replace));
    w->weight.ToProto(req.mutable_weight());
    if (!w->bias.empty()) w->bias.ToProto(req.mutable_bias());
    absl::StatusOr<v1::RegisterWeightsResponse> r = c.RegisterWeights(req, CallOpts());
    if (!r.ok()) return Fail(r.status());
    PrintWeightsInfo(r->info());
    return 0;
  }
  if (command == "forward" || command == "backward" || command == "update" ||
      command == "decode") {
    return RunOp(c, command);
  }
  return Fail(absl::InvalidArgumentError(absl::StrCat("unknown command '", command, "'")));
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
  absl::SetFlagsUsageConfig(usage);
  absl::SetProgramUsageMessage(
      "conv1d_client [flags] <health|info|register|unregister|list|forward|backward|update|decode>\n"
      "  decode runs the sequence (--shape BxDxL) through a decode session, --step_tokens\n"
      "  tokens per step.\n"
      "  health exits 0 only when SERVING; --verify exits 1 on a wrong answer;\n"
      "  other failures exit 2. .npy bf16 is carried as uint16 ('<u2') bits.");
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() != 2) {
    std::fprintf(stderr, "%s\n", absl::ProgramUsageMessage().data());
    return 2;
  }
  return conv1d::Run(args[1]);
}
