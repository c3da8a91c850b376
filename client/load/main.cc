// conv1d_load: load generator for conv1d-serve, in the manner of Triton's
// perf_analyzer. See --help (or client/README.md) for every flag.
//
// Thread-safety: main reads the flags and builds the options on its own
// thread; the runs then use their own threads (load_runner.h).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "client/load/https_get.h"
#include "client/load/load_runner.h"
#include "client/load/protocol_runs.h"
#include "client/load/session_load.h"
#include "client/npy.h"
#include "client/security_flags.h"
#include "server/util/command_line.h"
#include "server/util/program_errors.h"

ABSL_FLAG(std::string, target, "localhost:50051",
          "Server address, or a comma list of replicas used round-robin.");
ABSL_FLAG(int, channels, 0,
          "gRPC channels (TCP connections) in all; 0 = min(8, highest concurrency) "
          "in closed loop, 4 in open loop.");
ABSL_FLAG(std::string, concurrency, "",
          "Closed loop: requests kept in flight per step, a list '1,8,64' or a range "
          "'start:end:factor' ('1:64:2'). Default 1 when --rate is not given.");
ABSL_FLAG(std::string, rate, "",
          "Open loop: requests/s per step (list or range); sends follow the schedule "
          "whatever the server's speed, and sends more than --late_us behind are counted.");
ABSL_FLAG(std::string, arrival, "constant", "Open loop arrivals: constant or poisson.");
ABSL_FLAG(double, late_us, 1000, "Open loop: a send this far behind schedule counts as late.");
ABSL_FLAG(int, max_outstanding, 4096, "Open loop: most requests in flight before sends wait.");
ABSL_FLAG(double, duration_s, 6.0,
          "Measured seconds per step, at least (after --warmup_s): windows of --window_s run "
          "until this much has been measured and the last --stable_windows windows are "
          "stable, or --max_trials windows have run.");
ABSL_FLAG(double, window_s, 0,
          "Length of one measurement window; 0 = --duration_s / --stable_windows.");
ABSL_FLAG(double, warmup_s, 1.0, "Warm-up before the first window of each step (not measured).");
ABSL_FLAG(double, stability_pct, 10.0,
          "Stable: the last --stable_windows windows' throughput and p99 are each within this "
          "percentage of their mean.");
ABSL_FLAG(int, stable_windows, 3, "Windows compared by the stability rule, and reported.");
ABSL_FLAG(int, max_trials, 10,
          "Most windows per step (raised to what --duration_s needs); the last "
          "--stable_windows are reported (flagged unstable) if the rule is never met.");
ABSL_FLAG(std::string, preset, "",
          "Workload preset: decode-fwd (1x5120x1 fp32, initial+final states, registered "
          "weights), decode-update (64x5120x1 fp32 update, registered), small-fwd "
          "(1x2048x128 fp32), large-fwd (4x2048x2048 bf16), large-bwd (same, backward). "
          "All width 4, SiLU, bias. Other workload flags override the preset.");
ABSL_FLAG(std::string, op, "", "fwd, bwd or update (default fwd).");
ABSL_FLAG(std::string, shape, "", "BxDxL (default 1x2048x128).");
ABSL_FLAG(std::string, dtype, "", "Activation dtype: fp32, fp16, bf16.");
ABSL_FLAG(std::string, weight_dtype, "", "Weight dtype (default: the activation dtype).");
ABSL_FLAG(std::optional<int>, width, std::nullopt, "Kernel width >= 1 (default 4).");
ABSL_FLAG(std::string, layout, "", "cf (channel-first, default) or cl (channel-last).");
ABSL_FLAG(std::string, activation, "", "silu (default) or none.");
ABSL_FLAG(std::string, bias, "", "true (default) or false.");
ABSL_FLAG(std::string, weights, "",
          "inline (weights in every request, default) or registered (registered once "
          "before the run, unregistered after).");
ABSL_FLAG(std::string, initial_states, "", "fwd/bwd: send initial_states (true/false).");
ABSL_FLAG(std::string, final_states, "", "fwd: ask for final_states (true/false).");
ABSL_FLAG(std::string, mix, "",
          "File of weighted workload lines, e.g. 'weight=3 preset=small-fwd' / "
          "'weight=1 op=bwd shape=4x2048x2048 dtype=bf16' (keys as the flags above; "
          "'#' comments). Replaces the single workload.");
ABSL_FLAG(int, pool, 16, "Pre-generated random requests per workload (fewer if --pool_mb is reached).");
ABSL_FLAG(int, pool_mb, 1024, "Memory bound of the request pool.");
ABSL_FLAG(uint64_t, seed, 1, "Seed of the random requests and weights.");
ABSL_FLAG(double, verify_fraction, 0.0,
          "Fraction of answers checked against the CPU implementation on a side thread "
          "(skipped when it falls behind); any wrong answer fails the run.");
ABSL_FLAG(double, timeout_s, 30, "Deadline of each request.");
ABSL_FLAG(int, attempts, 1, "Attempts per request (1: failures are counted, not retried).");
ABSL_FLAG(std::string, json, "",
          "Write the results as JSON {\"steps\": [...]} to this file; each step has its "
          "window_rows and workload_rows.");
ABSL_FLAG(std::string, csv, "",
          "Write the results as CSV to this file: per step a 'step' row, then a 'window' row "
          "per window and a 'workload' row per workload (column 'row').");
ABSL_FLAG(bool, search, false,
          "Find the highest throughput whose p99 stays under --search_p99_ms: step up "
          "through the --concurrency/--rate levels (default 1:1024:2) until one misses the "
          "bound (or has errors, or is overloaded), then bisect --search_steps times. The "
          "verdict is printed and written to the JSON ('search'); exit 1 when no level held.");
ABSL_FLAG(double, search_p99_ms, 0, "--search: the p99 latency bound in milliseconds.");
ABSL_FLAG(int, search_steps, 4, "--search: steps spent bisecting after the first miss.");
ABSL_FLAG(std::string, schedule, "",
          "Open loop from a file of send times: seconds from the step's start, one per line "
          "('#' comments), ascending, at least 2; repeated until the step ends. Replaces "
          "--rate (its level is the mean rate).");
ABSL_FLAG(double, max_behind_ms, 1000,
          "Open loop: a send this far behind schedule ends the step early, marked "
          "overloaded, and the sweep stops there; 0 = never.");
ABSL_FLAG(std::string, x_file, "",
          "x of every request from a .npy file (its shape sets B, D, L); a single workload.");
ABSL_FLAG(std::string, dout_file, "", "bwd: dout of every request from a .npy file.");
ABSL_FLAG(std::string, state_file, "",
          "initial_states (fwd/bwd, which turns them on) or conv_state (update) from .npy.");
ABSL_FLAG(std::string, gpu_metrics_url, "",
          "Prometheus endpoint with GPU gauges (e.g. DCGM's exporter, http://host:9400/metrics; "
          "https:// as for --metrics_url), scraped at every window boundary: gpu_util_pct, "
          "gpu_power_w, gpu_memory_bytes per step and window.");
ABSL_FLAG(std::string, gpu_util_metric, "DCGM_FI_DEV_GPU_UTIL",
          "Gauge of GPU utilization in percent (mean over devices).");
ABSL_FLAG(std::string, gpu_power_metric, "DCGM_FI_DEV_POWER_USAGE",
          "Gauge of GPU power in watts (mean over devices).");
ABSL_FLAG(std::string, gpu_memory_metric, "DCGM_FI_DEV_FB_USED",
          "Gauge of GPU memory in use (summed over devices), in --gpu_memory_unit_bytes.");
ABSL_FLAG(double, gpu_memory_unit_bytes, 1048576, "Unit of --gpu_memory_metric (DCGM: MiB).");
ABSL_FLAG(std::string, metrics_url, "",
          "Server Prometheus endpoint (http://host:port/metrics, or https:// for a server "
          "with --metrics_tls_cert: see --metrics_tls_ca), scraped at every window "
          "boundary: server queue and compute time are reported beside client latency.");
ABSL_FLAG(std::string, metrics_tls_ca, "",
          "https:// --metrics_url and --gpu_metrics_url: PEM CA bundle that the endpoint's "
          "certificate must chain to (its host name or IP address must be in the "
          "certificate); empty = the system's default CAs.");
ABSL_FLAG(std::string, metrics_tls_cert, "",
          "https:// metrics URLs: PEM client certificate presented to an endpoint that "
          "requires one (mutual TLS, the server's --metrics_tls_client_ca); needs "
          "--metrics_tls_key.");
ABSL_FLAG(std::string, metrics_tls_key, "", "PEM private key of --metrics_tls_cert.");
ABSL_FLAG(std::string, queue_metric, "conv1d_request_queue_seconds",
          "Histogram of server queue time (its _sum/_count are used).");
ABSL_FLAG(std::string, compute_metric, "conv1d_compute_seconds",
          "Histogram of server compute time (its _sum/_count are used).");
ABSL_FLAG(std::string, requests_metric, "conv1d_requests_total", "Counter of server requests.");
ABSL_FLAG(std::string, requests_filter, "",
          "Count only --requests_metric samples whose labels contain this, e.g. method=\"Forward\".");
ABSL_FLAG(std::string, protocol, "",
          "Compare protocols: a comma list of v1 (conv1d.v1) and oip (the inference "
          "protocol's ModelInfer), each run in turn against the same server; with "
          "--memory, every combination. --preset may then be a comma list too (each preset "
          "measured on its own). --csv rows: protocol,memory,workload,concurrency,"
          "throughput_rps,p50_us,p99_us,requests,errors,verified,wrong,gbps. Default v1.");
ABSL_FLAG(std::string, memory, "",
          "Where request tensors travel, a comma list: grpc (bytes in the messages, default) "
          "system (inputs and outputs in a POSIX shared-memory region registered with "
          "SystemSharedMemoryRegister, messages carrying references) or, in GPU builds, device "
          "(device memory of device 0 shared through an IPC handle, CudaSharedMemoryRegister); "
          "fwd workloads, --concurrency only.");
ABSL_FLAG(std::string, mode, "",
          "Session workloads instead of requests: 'session' (one Decode stream per chain, "
          "x only on the wire), 'unary-decode-fwd' (a Forward per step with "
          "initial_states/final_states, today's path) or both, comma-separated. "
          "--concurrency chains run at once, each a chain of steps of S tokens "
          "(--shape BxDxS); reports steps/s and per-step latency.");
ABSL_FLAG(int64_t, chain_steps, 0,
          "Session workloads: steps of a chain before it ends and a new one starts; 0 = one "
          "chain per thread for the whole step.");
ABSL_FLAG(int64_t, chain_steps_min, 0,
          "Session workloads: > 0 draws each chain's length from chain_steps_min..chain_steps.");
ABSL_FLAG(int64_t, step_tokens_min, 0,
          "Session workloads: > 0 draws each step's token count from step_tokens_min..S "
          "(S from --shape); 0 = every step has S tokens.");
ABSL_FLAG(bool, verify_steps, true,
          "Session workloads: check steps against a local float64 run of the same "
          "chain; any difference fails the run.");
ABSL_FLAG(double, verify_step_fraction, 1.0,
          "Session workloads with --verify_steps: the fraction of steps (0..1) whose answer is "
          "checked, a seeded random sample of every chain slot's steps; the others still "
          "advance the local chain, so each checked step starts from the exact state. "
          "1 = every step. The 'checked' column counts them.");
ABSL_FLAG(bool, allow_errors, false, "Exit 0 even when requests failed (wrong answers still fail).");
ABSL_FLAG(bool, progress, true, "Live progress line (only when stdout is a terminal).");

namespace conv1d {
namespace {

// Fail exits 2 as a usage error does: "2 on usage/setup errors" (--help).
constexpr ProgramErrors kErrors{"conv1d_load", /*fail_status=*/2};

absl::StatusOr<std::vector<double>> ReadSchedule(const std::string& path) {
  std::ifstream f(path);
  if (!f) return absl::NotFoundError(absl::StrCat("--schedule: cannot open ", path));
  std::vector<double> out;
  std::string line;
  int line_no = 0;
  while (std::getline(f, line)) {
    ++line_no;
    const std::string uncommented = line.substr(0, line.find('#'));
    const absl::string_view text = absl::StripAsciiWhitespace(uncommented);
    if (text.empty()) continue;
    double t;
    if (!absl::SimpleAtod(text, &t) || !std::isfinite(t) || t < 0 ||
        (!out.empty() && t < out.back())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--schedule: line ", line_no, ": '", text,
          "' is not a time in seconds >= 0 and >= the one before"));
    }
    out.push_back(t);
  }
  if (out.size() < 2 || out.back() <= out.front()) {
    return absl::InvalidArgumentError("--schedule: needs at least 2 distinct send times");
  }
  return out;
}

// Reads the --*_file inputs into `o`, setting the workload's shape from x.
absl::Status ReadInputs(LoadOptions* o) {
  WorkloadSpec& spec = o->workloads[0];
  auto read = [&](const std::string& flag, const std::string& path,
                  HostTensor* out) -> absl::Status {
    if (path.empty()) return absl::OkStatus();
    absl::StatusOr<HostTensor> t = ReadNpyFile(path);
    if (!t.ok()) return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", t.status().message()));
    if (t->shape.size() != 3) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", path, " is not 3-d"));
    }
    *out = t->CastTo(spec.dtype);
    return absl::OkStatus();
  };
  if (absl::Status s = read("x_file", absl::GetFlag(FLAGS_x_file), &o->input_x); !s.ok()) return s;
  if (!o->input_x.empty()) {
    const auto& sh = o->input_x.shape;
    spec.batch = sh[0];
    spec.dim = spec.channel_last ? sh[2] : sh[1];
    spec.seqlen = spec.channel_last ? sh[1] : sh[2];
  }
  if (absl::Status s = read("dout_file", absl::GetFlag(FLAGS_dout_file), &o->input_dout); !s.ok()) {
    return s;
  }
  if (absl::Status s = read("state_file", absl::GetFlag(FLAGS_state_file), &o->input_state);
      !s.ok()) {
    return s;
  }
  if (!o->input_state.empty()) {
    if (spec.op == WorkloadOp::kUpdate) {
      spec.state_len = o->input_state.shape[2];
    } else {
      spec.initial_states = true;
    }
  }
  if (!o->input_dout.empty() && spec.op != WorkloadOp::kBackward) {
    return absl::InvalidArgumentError("--dout_file: only with --op=bwd");
  }
  return absl::OkStatus();
}

// `preset` replaces --preset's value (a protocol comparison runs a list).
absl::StatusOr<std::vector<WorkloadSpec>> Workloads(const std::string& preset) {
  WorkloadSpec spec;
  auto apply = [&](const char* key, const std::string& v) -> absl::Status {
    return v.empty() ? absl::OkStatus() : ApplyWorkloadKey(key, v, &spec);
  };
  const std::pair<const char*, std::string> flags[] = {
      {"preset", preset},
      {"op", absl::GetFlag(FLAGS_op)},
      {"shape", absl::GetFlag(FLAGS_shape)},
      {"dtype", absl::GetFlag(FLAGS_dtype)},
      {"weight_dtype", absl::GetFlag(FLAGS_weight_dtype)},
      {"width", absl::GetFlag(FLAGS_width) ? absl::StrCat(*absl::GetFlag(FLAGS_width)) : ""},
      {"layout", absl::GetFlag(FLAGS_layout)},
      {"activation", absl::GetFlag(FLAGS_activation)},
      {"bias", absl::GetFlag(FLAGS_bias)},
      {"weights", absl::GetFlag(FLAGS_weights)},
      {"initial_states", absl::GetFlag(FLAGS_initial_states)},
      {"final_states", absl::GetFlag(FLAGS_final_states)},
  };
  for (const auto& [key, value] : flags) {
    if (absl::Status s = apply(key, value); !s.ok()) return s;
    // A --dtype without --weight_dtype moves the weights along.
    if (std::string(key) == "dtype" && !value.empty()) spec.weight_dtype = spec.dtype;
  }
  const std::string mix = absl::GetFlag(FLAGS_mix);
  if (mix.empty()) return std::vector<WorkloadSpec>{spec};
  std::ifstream f(mix);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot open mix file ", mix));
  std::stringstream ss;
  ss << f.rdbuf();
  return ParseMix(ss.str(), spec);
}

absl::Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::trunc);
  f << text;
  if (!f) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

// Ranges of the numeric flags; the first violated one names its flag.
absl::Status CheckNumericFlags() {
  struct Range {
    const char* flag;
    double value, lo, hi;
  };
  const Range ranges[] = {
      {"timeout_s", absl::GetFlag(FLAGS_timeout_s), 1e-3, 1e7},
      {"attempts", static_cast<double>(absl::GetFlag(FLAGS_attempts)), 1, 100},
      {"duration_s", absl::GetFlag(FLAGS_duration_s), 1e-3, 1e7},
      {"window_s", absl::GetFlag(FLAGS_window_s), 0, 1e7},
      {"warmup_s", absl::GetFlag(FLAGS_warmup_s), 0, 1e7},
      {"stability_pct", absl::GetFlag(FLAGS_stability_pct), 1e-9, 1e9},
      {"stable_windows", static_cast<double>(absl::GetFlag(FLAGS_stable_windows)), 1, 1e6},
      {"max_trials", static_cast<double>(absl::GetFlag(FLAGS_max_trials)), 1, 1e6},
      {"verify_fraction", absl::GetFlag(FLAGS_verify_fraction), 0, 1},
      {"verify_step_fraction", absl::GetFlag(FLAGS_verify_step_fraction), 0, 1},
      {"late_us", absl::GetFlag(FLAGS_late_us), 0, 1e12},
      {"max_outstanding", static_cast<double>(absl::GetFlag(FLAGS_max_outstanding)), 1, 1e9},
      {"max_behind_ms", absl::GetFlag(FLAGS_max_behind_ms), 0, 1e12},
      {"pool", static_cast<double>(absl::GetFlag(FLAGS_pool)), 1, 1e6},
      {"pool_mb", static_cast<double>(absl::GetFlag(FLAGS_pool_mb)), 1, 1 << 24},
      {"channels", static_cast<double>(absl::GetFlag(FLAGS_channels)), 0, 4096},
      {"search_steps", static_cast<double>(absl::GetFlag(FLAGS_search_steps)), 0, 100},
      {"search_p99_ms", absl::GetFlag(FLAGS_search_p99_ms), 0, 1e9},
      {"gpu_memory_unit_bytes", absl::GetFlag(FLAGS_gpu_memory_unit_bytes), 1e-9, 1e18},
  };
  for (const Range& r : ranges) {
    if (!(r.value >= r.lo && r.value <= r.hi)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", r.flag, ": ", r.value, " is not in ", r.lo, " ... ", r.hi));
    }
  }
  return absl::OkStatus();
}

// The TLS of https:// scrapes from --metrics_tls_*: null when no URL is
// https:// (then none of those flags may be given).
absl::StatusOr<std::shared_ptr<const ScrapeTls>> MetricsTlsFromFlags() {
  ScrapeTlsOptions t;
  t.ca_file = absl::GetFlag(FLAGS_metrics_tls_ca);
  t.cert_file = absl::GetFlag(FLAGS_metrics_tls_cert);
  t.key_file = absl::GetFlag(FLAGS_metrics_tls_key);
  const bool https = absl::StartsWith(absl::GetFlag(FLAGS_metrics_url), "https://") ||
                     absl::StartsWith(absl::GetFlag(FLAGS_gpu_metrics_url), "https://");
  if (https) return ScrapeTls::Create(t);
  const std::pair<const char*, const std::string*> given[] = {
      {"metrics_tls_ca", &t.ca_file},
      {"metrics_tls_cert", &t.cert_file},
      {"metrics_tls_key", &t.key_file}};
  for (const auto& [flag, value] : given) {
    if (!value->empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", flag, ": needs an https:// --metrics_url or --gpu_metrics_url"));
    }
  }
  return nullptr;
}

int Main() {
  if (absl::Status s = CheckNumericFlags(); !s.ok()) return kErrors.UsageError(s.message());
  absl::StatusOr<std::shared_ptr<const ScrapeTls>> metrics_tls = MetricsTlsFromFlags();
  if (!metrics_tls.ok()) return kErrors.UsageError(metrics_tls.status().message());
  LoadOptions o;
  const bool compare =
      !absl::GetFlag(FLAGS_protocol).empty() || !absl::GetFlag(FLAGS_memory).empty();
  const std::vector<std::string> presets =
      compare ? absl::StrSplit(absl::GetFlag(FLAGS_preset), ',')
              : std::vector<std::string>{absl::GetFlag(FLAGS_preset)};
  absl::StatusOr<std::vector<WorkloadSpec>> w = Workloads(presets.front());
  if (!w.ok()) return kErrors.UsageError(w.status().message());
  o.workloads = *std::move(w);
  const std::string conc = absl::GetFlag(FLAGS_concurrency), rate = absl::GetFlag(FLAGS_rate);
  const std::string schedule = absl::GetFlag(FLAGS_schedule);
  if (!conc.empty() + !rate.empty() + !schedule.empty() > 1) {
    return kErrors.UsageError("give one of --concurrency, --rate and --schedule");
  }
  o.search = absl::GetFlag(FLAGS_search);
  o.search_p99_ms = absl::GetFlag(FLAGS_search_p99_ms);
  o.search_bisections = absl::GetFlag(FLAGS_search_steps);
  if (o.search && !schedule.empty()) {
    return kErrors.UsageError("--search varies --concurrency or --rate, not a --schedule");
  }
  o.closed_loop = rate.empty() && schedule.empty();
  if (!schedule.empty()) {
    absl::StatusOr<std::vector<double>> times = ReadSchedule(schedule);
    if (!times.ok()) return kErrors.UsageError(times.status().message());
    o.schedule_s = *std::move(times);
    o.levels = {(o.schedule_s.size() - 1) / (o.schedule_s.back() - o.schedule_s.front())};
  } else {
    const std::string text = o.closed_loop ? conc : rate;
    absl::StatusOr<std::vector<double>> levels =
        ParseLevels(!text.empty() ? text : o.search ? "1:1024:2" : "1");
    if (!levels.ok()) {
      return kErrors.UsageError(absl::StrCat(o.closed_loop ? "--concurrency: " : "--rate: ",
                                             levels.status().message()));
    }
    o.levels = *levels;
    if (o.search) std::sort(o.levels.begin(), o.levels.end());
  }
  o.max_behind_ms = absl::GetFlag(FLAGS_max_behind_ms);
  if (absl::Status s = ReadInputs(&o); !s.ok()) return kErrors.UsageError(s.message());
  for (const WorkloadSpec& spec : o.workloads) {
    if (absl::StatusOr<int64_t> b = CheckWorkloadBytes(spec, (int64_t{1} << 31) - 1); !b.ok()) {
      return kErrors.UsageError(absl::StrCat("--", b.status().message()));
    }
  }
  o.gpu_metrics_url = absl::GetFlag(FLAGS_gpu_metrics_url);
  o.gpu_util_metric = absl::GetFlag(FLAGS_gpu_util_metric);
  o.gpu_power_metric = absl::GetFlag(FLAGS_gpu_power_metric);
  o.gpu_memory_metric = absl::GetFlag(FLAGS_gpu_memory_metric);
  o.gpu_memory_unit_bytes = absl::GetFlag(FLAGS_gpu_memory_unit_bytes);
  const std::string arrival = absl::GetFlag(FLAGS_arrival);
  if (arrival != "constant" && arrival != "poisson") {
    return kErrors.UsageError("--arrival is constant or poisson");
  }
  o.poisson = arrival == "poisson";
  o.late_us = absl::GetFlag(FLAGS_late_us);
  o.max_outstanding = absl::GetFlag(FLAGS_max_outstanding);
  o.duration_s = absl::GetFlag(FLAGS_duration_s);
  o.window_s = absl::GetFlag(FLAGS_window_s);
  o.warmup_s = absl::GetFlag(FLAGS_warmup_s);
  o.stability_pct = absl::GetFlag(FLAGS_stability_pct);
  o.stable_windows = absl::GetFlag(FLAGS_stable_windows);
  o.max_trials = absl::GetFlag(FLAGS_max_trials);
  o.pool_size = absl::GetFlag(FLAGS_pool);
  o.pool_bytes = int64_t{absl::GetFlag(FLAGS_pool_mb)} << 20;
  o.seed = absl::GetFlag(FLAGS_seed);
  o.verify_fraction = absl::GetFlag(FLAGS_verify_fraction);
  o.timeout = absl::Seconds(absl::GetFlag(FLAGS_timeout_s));
  o.max_attempts = absl::GetFlag(FLAGS_attempts);
  o.metrics_url = absl::GetFlag(FLAGS_metrics_url);
  o.metrics_tls = *std::move(metrics_tls);
  o.queue_metric = absl::GetFlag(FLAGS_queue_metric);
  o.compute_metric = absl::GetFlag(FLAGS_compute_metric);
  o.requests_metric = absl::GetFlag(FLAGS_requests_metric);
  o.requests_filter = absl::GetFlag(FLAGS_requests_filter);
  o.progress = absl::GetFlag(FLAGS_progress) && isatty(STDOUT_FILENO);

  ClientOptions co;
  co.targets = SplitTargets(absl::GetFlag(FLAGS_target));
  int channels = absl::GetFlag(FLAGS_channels);
  if (channels <= 0) {
    double top = 1;
    for (double l : o.levels) top = std::max(top, l);
    channels = o.closed_loop ? static_cast<int>(std::min(8.0, top)) : 4;
  }
  co.num_channels = channels;
  co.retry.max_attempts = o.max_attempts;
  co.default_timeout = o.timeout;
  co.security = SecurityFromFlags();
  absl::StatusOr<std::unique_ptr<Conv1dClient>> client = Conv1dClient::Create(co);
  if (!client.ok()) return kErrors.Fail(client.status());
  std::printf("targets: %s, %d channel(s)\n", absl::GetFlag(FLAGS_target).c_str(),
              (*client)->num_channels());

  if (!absl::GetFlag(FLAGS_mode).empty()) {
    if (!o.closed_loop) {
      return kErrors.Fail(absl::InvalidArgumentError("--mode takes --concurrency, not --rate"));
    }
    SessionLoadOptions so;
    so.spec = o.workloads.front();
    so.modes = absl::StrSplit(absl::GetFlag(FLAGS_mode), ',', absl::SkipEmpty());
    so.concurrency.clear();
    for (double l : o.levels) so.concurrency.push_back(static_cast<int>(l));
    so.warmup_s = o.warmup_s;
    so.duration_s = o.duration_s;
    so.chain_steps = absl::GetFlag(FLAGS_chain_steps);
    so.chain_steps_min = absl::GetFlag(FLAGS_chain_steps_min);
    so.step_tokens_min = absl::GetFlag(FLAGS_step_tokens_min);
    so.verify = absl::GetFlag(FLAGS_verify_steps);
    so.verify_step_fraction = absl::GetFlag(FLAGS_verify_step_fraction);
    so.seed = o.seed;
    so.timeout = o.timeout;
    absl::StatusOr<std::vector<SessionLoadRow>> rows = RunSessionLoad(so, client->get());
    if (!rows.ok()) return kErrors.Fail(rows.status());
    if (!absl::GetFlag(FLAGS_csv).empty()) {
      if (absl::Status s = WriteFile(absl::GetFlag(FLAGS_csv), SessionLoadCsv(*rows)); !s.ok()) {
        return kErrors.Fail(s);
      }
    }
    int64_t errors = 0, wrong = 0, checked = 0, steps = 0;
    std::string first;
    for (const SessionLoadRow& r : *rows) {
      errors += r.errors;
      wrong += r.wrong;
      checked += r.checked;
      steps += r.steps + r.wrong;
      if (first.empty()) first = r.first_error;
    }
    std::printf("total: %lld errors, %lld wrong steps; %lld of %lld measured steps checked\n",
                static_cast<long long>(errors), static_cast<long long>(wrong),
                static_cast<long long>(checked), static_cast<long long>(steps));
    if (wrong > 0) {
      std::fprintf(stderr, "conv1d_load: wrong steps, first: %s\n", first.c_str());
      return 1;
    }
    if (errors > 0 && !absl::GetFlag(FLAGS_allow_errors)) {
      std::fprintf(stderr, "conv1d_load: failed steps, first: %s\n", first.c_str());
      return 1;
    }
    return 0;
  }
  if (compare) {
    if (!absl::GetFlag(FLAGS_mode).empty() || o.search) {
      return kErrors.UsageError("--protocol/--memory do not combine with --mode or --search");
    }
    std::vector<LabeledWorkloads> sets;
    for (const std::string& preset : presets) {
      absl::StatusOr<std::vector<WorkloadSpec>> ws = Workloads(preset);
      if (!ws.ok()) return kErrors.UsageError(ws.status().message());
      sets.push_back({preset.empty() ? ws->front().Describe() : preset, *std::move(ws)});
    }
    auto list = [](const std::string& v, const char* dflt) -> std::vector<std::string> {
      if (v.empty()) return {dflt};
      return absl::StrSplit(v, ',', absl::SkipEmpty());
    };
    absl::StatusOr<std::vector<ProtocolRun>> runs =
        RunProtocolMatrix(o, sets, list(absl::GetFlag(FLAGS_protocol), "v1"),
                          list(absl::GetFlag(FLAGS_memory), "grpc"), client->get());
    if (!runs.ok()) {
      return absl::IsInvalidArgument(runs.status())
                 ? kErrors.UsageError(runs.status().message())
                 : kErrors.Fail(runs.status());
    }
    return FinishProtocolRuns(*runs, absl::GetFlag(FLAGS_csv), absl::GetFlag(FLAGS_json),
                              absl::GetFlag(FLAGS_allow_errors));
  }
  absl::StatusOr<std::unique_ptr<LoadRunner>> runner = LoadRunner::Create(o, client->get());
  if (!runner.ok()) return kErrors.UsageError(runner.status().message());
  absl::StatusOr<RunReport> report = (*runner)->Run();
  if (!report.ok()) return kErrors.Fail(report.status());
  if (!absl::GetFlag(FLAGS_json).empty()) {
    if (absl::Status s = WriteFile(absl::GetFlag(FLAGS_json), ReportJson(*report)); !s.ok()) {
      return kErrors.Fail(s);
    }
  }
  if (!absl::GetFlag(FLAGS_csv).empty()) {
    if (absl::Status s = WriteFile(absl::GetFlag(FLAGS_csv), ReportCsv(*report)); !s.ok()) {
      return kErrors.Fail(s);
    }
  }
  std::printf("total: %lld requests, %lld errors, %lld wrong answers\n",
              static_cast<long long>(report->total_requests),
              static_cast<long long>(report->total_errors),
              static_cast<long long>(report->wrong_answers));
  if (report->wrong_answers > 0) {
    std::fprintf(stderr, "conv1d_load: wrong answers, first: %s\n", report->first_wrong.c_str());
    return 1;
  }
  if (report->searched) return report->search.found ? 0 : 1;
  if (report->total_errors > 0 && !absl::GetFlag(FLAGS_allow_errors)) return 1;
  return 0;
}

}  // namespace
}  // namespace conv1d

int main(int argc, char** argv) {
  // --help lists this tool's own flags (absl matches by file name otherwise).
  absl::FlagsUsageConfig usage;
  usage.contains_help_flags = [](absl::string_view file) {
    return absl::StrContains(file, "client/load/") ||
           absl::StrContains(file, "client/security_flags");
  };
  usage.contains_helpshort_flags = usage.contains_help_flags;
  absl::SetFlagsUsageConfig(usage);
  absl::SetProgramUsageMessage(
      "conv1d_load [flags]: load generator for conv1d-serve.\n"
      "  Closed loop: --concurrency=1,8,64 or 1:64:2; open loop: --rate=100:1600:2 "
      "[--arrival=poisson].\n  Exit 1 when a request failed (unless --allow_errors) or an "
      "answer was wrong, or --search found no level under its bound; 2 on usage/setup "
      "errors.");
  // The generator measures the server: absl's lock-order bookkeeping (on in
  // the distribution's build) would add a graph update to every lock that
  // its and gRPC's threads take.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // Exit 0 after --help, 2 after a malformed flag.
  std::vector<char*> args = conv1d::ParseFlags(argc, argv);
  if (args.size() > 1) {
    return conv1d::kErrors.UsageError(absl::StrCat("unexpected argument '", args[1], "'"));
  }
  return conv1d::Main();
}
