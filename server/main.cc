// conv1d_server: serves causal depthwise conv1d over gRPC (see README.md).
//
// Parses flags, sets up the log (stderr, --log_format, --log_level) and the
// optional access log, builds a conv1d::Server, logs one startup line and
// waits for SIGTERM or SIGINT, which drain the server (health NOT_SERVING,
// stop accepting, finish in-flight calls) and exit 0 within
// --drain_timeout_s.
// A second signal during the drain exits at once with status 1, and so does
// a drain still running 10 s past --drain_timeout_s (a batch stuck in the
// backend).
// SIGHUP re-reads --auth_tokens_file (a bad file keeps the previous tokens
// and logs why); TLS certificates are re-read by a file watcher
// (--tls_reload_interval_s), the metrics endpoint's on their next handshake
// after a change (docs/security.md).
// Exit status 2: an invalid flag value, including a listen address that is
// malformed or cannot be bound (port taken); 1: the server could not start.
#include <pthread.h>
#include <signal.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "server/frontend/auth.h"
#include "server/frontend/server.h"
#include "server/logging/access_log.h"
#include "server/logging/log_setup.h"
#include "server/util/command_line.h"
#include "server/util/malloc_settings.h"
#include "server/util/program_errors.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, listen, conv1d::ServerOptions().listen_address,
          "host:port of the gRPC endpoint (port 0 picks a free port); loopback "
          "by default, 0.0.0.0:50051 (or [::]:50051) serves other hosts, e.g. "
          "from a container. A taken port exits 2");
ABSL_FLAG(std::string, metrics_listen, conv1d::ServerOptions().metrics_listen_address,
          "host:port of the Prometheus /metrics endpoint; empty disables it");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate chain of the gRPC listener; with --tls_key serves TLS "
          "only (plaintext connections fail)");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert (unencrypted)");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA bundle: require and verify a client certificate signed by it "
          "(mutual TLS); needs --tls_cert");
ABSL_FLAG(int32_t, tls_reload_interval_s, 60,
          "seconds between re-reads of the --tls_* files (certificate renewal "
          "without restart), 1..86400");
ABSL_FLAG(std::string, metrics_tls_cert, "",
          "PEM certificate chain of the metrics endpoint (HTTPS); re-read when "
          "the file changes");
ABSL_FLAG(std::string, metrics_tls_key, "", "PEM private key of --metrics_tls_cert");
ABSL_FLAG(std::string, metrics_tls_client_ca, "",
          "PEM CA bundle that scrapers' client certificates must chain to");
ABSL_FLAG(std::string, auth_tokens_file, "",
          "file of '<token> <principal> <infer|admin>' lines; when set, every "
          "call needs 'authorization: Bearer <token>' metadata. Re-read on SIGHUP");
ABSL_FLAG(bool, auth_health_open, true,
          "with --auth_tokens_file: grpc.health.v1 and reflection answer without "
          "a token (probes); false needs --tls_cert");
ABSL_FLAG(std::string, backend, "auto",
          "compute backend: auto (gpu when this build has it and a device is "
          "visible, else cpu), gpu, cpu or echo (no compute; copies inputs to "
          "outputs)");
ABSL_FLAG(int32_t, threads, 0, "CPU backend compute threads; 0 = every core");
ABSL_FLAG(int32_t, lanes, 0,
          "batches in flight at once (scheduler lanes; per device for gpu); "
          "0 = the backend's default (cpu 2, gpu 4 per device)");
ABSL_FLAG(std::string, devices, "",
          "gpu backend: comma list of device indices to use; empty = all visible");
ABSL_FLAG(int64_t, lane_buffer_bytes, 0,
          "gpu backend: pinned staging and device buffer per lane; a larger "
          "request is split along B; 0 = 1/128 of device memory, 64 MiB..512 MiB");
ABSL_FLAG(int64_t, weight_cache_bytes, 0,
          "gpu backend: device memory per device for registered weights; "
          "0 = 1/32 of device memory, at most 4 GiB");
ABSL_FLAG(int64_t, host_pool_bytes, 0,
          "gpu backend: page-locked host memory that large request tensors are "
          "received into and outputs sent from, moved by DMA with no staging "
          "copy; 0 = 1/32 of physical memory, 64 MiB..4 GiB; -1 = none");
ABSL_FLAG(std::string, gpu_inject_fault, "",
          "testing only: gpu backend fails every N-th fused launch (launch:N) or "
          "device-to-host copy (copy:N) of each lane with a non-sticky error; the "
          "batch fails, the server goes on; empty = never");
ABSL_FLAG(std::string, host_tensors, "auto",
          "where large compute-request tensors and outputs live: auto (in the "
          "backend's page-locked host buffers when it has them, i.e. gpu with a "
          "host pool; else protobuf strings), always (host buffers for every "
          "backend), never");
ABSL_FLAG(int64_t, host_tensor_min_bytes, conv1d::ServerOptions().host_tensor_min_bytes,
          "smallest tensor that --host_tensors moves to host buffers (one copy "
          "on receipt, none on send); -1 = none");
ABSL_FLAG(int64_t, max_batch_bytes, conv1d::SchedulerOptions().max_batch_bytes,
          "bytes (inputs plus outputs) per fused batch; a larger request runs alone");
ABSL_FLAG(int32_t, max_batch_requests, 64,
          "requests per fused batch, 1..65536; 1 disables fusion");
ABSL_FLAG(int64_t, max_queue_delay_us, 0,
          "how long a batch may wait to fill, in microseconds; 0 = run what is "
          "queued now");
ABSL_FLAG(int32_t, completion_threads, 4,
          "threads that share out the completions (response serialization and "
          "call finish) of fused batches with the lane, 0..64; 0 = lanes do it all");
ABSL_FLAG(int32_t, completion_chunk, 8,
          "fewest completions of a fused batch handed to one completion thread, "
          "1..4096 (a batch of fewer than twice this stays on the lane)");
ABSL_FLAG(int32_t, max_queued_requests, 4096,
          "requests queued before RESOURCE_EXHAUSTED");
ABSL_FLAG(int64_t, max_message_bytes, int64_t{1} << 30,
          "gRPC max receive/send message size, 256 MiB .. 2 GiB - 1");
ABSL_FLAG(int64_t, max_request_bytes, 0,
          "bytes (inputs plus outputs) one compute request may move; "
          "0 = --max_message_bytes");
ABSL_FLAG(int64_t, max_weight_bytes, int64_t{16} << 30,
          "total bytes of registered weight sets");
ABSL_FLAG(int32_t, shm_max_regions, 1024,
          "shared-memory regions registered at once (inference protocol "
          "SystemSharedMemoryRegister and CudaSharedMemoryRegister), 1..65536");
ABSL_FLAG(bool, oip_require_all_inputs, false,
          "inference protocol: every input of a model (weight, bias, states) is "
          "required, and ModelConfig marks none optional (for clients such as "
          "perf_analyzer --shared-memory, which refuse optional inputs); false: "
          "only x (and dout, conv_state) are required");
ABSL_FLAG(int64_t, session_state_bytes, int64_t{256} << 10,
          "bytes of one decode-session state slot: the largest state "
          "B*D*(state_len+max_draft_tokens)*sizeof(dtype) a session may hold");
ABSL_FLAG(int32_t, max_sessions, 256,
          "decode-session state slots taken at start (the most sessions open at "
          "once; a full pool answers RESOURCE_EXHAUSTED), 1..1048576");
ABSL_FLAG(int64_t, session_idle_timeout_s, 300,
          "seconds after which a decode session with no operation expires "
          "(sessions of open Decode streams do not); 0 = never");
ABSL_FLAG(int64_t, max_inflight_bytes, 0,
          "bytes of calls (received messages and their responses) held at once; "
          "a call past it is refused RESOURCE_EXHAUSTED before it is parsed; also "
          "gRPC's memory quota for the transport. 0 = a quarter of physical "
          "memory (or of the cgroup's limit); else 1048576 .. 2^62");
ABSL_FLAG(double, drain_timeout_s, 30,
          "on SIGTERM/SIGINT, seconds to finish in-flight requests before "
          "cancelling them and exiting");
ABSL_FLAG(int32_t, drain_grace_ms, 500,
          "on SIGTERM/SIGINT, milliseconds health reports NOT_SERVING before "
          "the listener stops accepting (within --drain_timeout_s)");
ABSL_FLAG(double, max_connection_age_s, 0,
          "seconds after which a client connection is asked to close (GOAWAY) "
          "so that clients reconnect and spread over new replicas; 0 = never; "
          "up to 2147483");
ABSL_FLAG(double, max_connection_age_grace_s, 30,
          "seconds that calls still running on a connection past "
          "--max_connection_age_s may take before the connection is closed "
          "under them; 0..2147483");
ABSL_FLAG(std::string, log_level, "info",
          "trace, debug, info, warn, error, critical or off; debug adds a "
          "line per finished request");
ABSL_FLAG(std::string, log_format, "text",
          "stderr log format: text, or json (one object per line: ts, level, "
          "logger, thread, msg)");
ABSL_FLAG(int32_t, malloc_arena_max, 8,
          "most glibc malloc arenas (0 = glibc's default, 8 per core). Request "
          "threads that each get an arena hold on to freed message buffers, so "
          "resident memory climbs for minutes under load; a cap keeps it flat. "
          "The MALLOC_ARENA_MAX environment variable, when set, wins");
ABSL_FLAG(int64_t, malloc_trim_threshold, int64_t{1} << 20,
          "free bytes at the top of a glibc malloc heap above which freeing "
          "returns them to the system (0 = glibc's default, which grows to 64 "
          "MiB after large requests and then keeps up to that much per arena "
          "resident); 0..2147483647. The MALLOC_TRIM_THRESHOLD_ environment "
          "variable, when set, wins");
ABSL_FLAG(std::string, access_log, "",
          "file to append one line per finished request to (peer, method, "
          "request id, code, latency, bytes; in --log_format); '-' = stderr; "
          "empty = no access log");

namespace {

constexpr conv1d::ProgramErrors kErrors{"conv1d_server"};

bool IsHelpFlagFile(absl::string_view path) {
  return absl::StrContains(path, "server/main.cc");
}

}  // namespace

int main(int argc, char** argv) {
  // Block the drain signals before any thread exists, so every thread
  // inherits the mask and only sigwait below receives them.
  sigset_t drain_signals;
  sigemptyset(&drain_signals);
  sigaddset(&drain_signals, SIGTERM);
  sigaddset(&drain_signals, SIGINT);
  sigset_t blocked = drain_signals;
  sigaddset(&blocked, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &blocked, nullptr);

  absl::FlagsUsageConfig usage_config;
  usage_config.contains_help_flags = IsHelpFlagFile;
  usage_config.contains_helpshort_flags = IsHelpFlagFile;
  usage_config.version_string = [] {
    return absl::StrCat("conv1d_server ", conv1d::ServerVersion(), "\n");
  };
  absl::SetFlagsUsageConfig(usage_config);
  absl::SetProgramUsageMessage(
      "Serves causal depthwise conv1d (forward, backward, decode update) over "
      "gRPC.\nUsage: conv1d_server [--listen=127.0.0.1:50051] [--backend=auto] ...");
  // Exit 2 after a malformed flag (as for every other invalid value), 0
  // after --help.
  std::vector<char*> positional = conv1d::ParseFlags(argc, argv);
  if (positional.size() > 1) {
    return kErrors.UsageError(absl::StrCat("unexpected argument '", positional[1], "'"));
  }

  const std::string level_name = absl::GetFlag(FLAGS_log_level);
  const std::optional<spdlog::level::level_enum> level = conv1d::ParseLogLevel(level_name);
  if (!level.has_value()) {
    return kErrors.UsageError(absl::StrCat("--log_level: unknown level '", level_name,
                                           "', expected trace, debug, info, warn, error, "
                                           "critical or off"));
  }
  const std::string format_name = absl::GetFlag(FLAGS_log_format);
  const std::optional<conv1d::LogFormat> format = conv1d::ParseLogFormat(format_name);
  if (!format.has_value()) {
    return kErrors.UsageError(absl::StrCat("--log_format: unknown format '", format_name,
                                           "', expected text or json"));
  }
  conv1d::ConfigureLogging(*format, *level);
  std::shared_ptr<conv1d::AccessLog> access_log;
  const std::string access_log_path = absl::GetFlag(FLAGS_access_log);
  if (!access_log_path.empty()) {
    absl::StatusOr<std::unique_ptr<conv1d::AccessLog>> created =
        conv1d::AccessLog::Create(access_log_path, *format);
    if (!created.ok()) {
      return kErrors.UsageError(absl::StrCat("--access_log: ", created.status().message()));
    }
    access_log = std::move(*created);
  }

  const double drain_timeout_s = absl::GetFlag(FLAGS_drain_timeout_s);
  if (!(drain_timeout_s >= 0 && drain_timeout_s <= 86400)) {
    return kErrors.UsageError(absl::StrCat("--drain_timeout_s: ", drain_timeout_s,
                                           " is outside 0..86400"));
  }
  const int32_t drain_grace_ms = absl::GetFlag(FLAGS_drain_grace_ms);
  if (drain_grace_ms < 0) {
    return kErrors.UsageError(
        absl::StrCat("--drain_grace_ms: ", drain_grace_ms, " is negative"));
  }
  const int32_t arena_max = absl::GetFlag(FLAGS_malloc_arena_max);
  if (arena_max < 0 || arena_max > 1024) {
    return kErrors.UsageError(
        absl::StrCat("--malloc_arena_max: ", arena_max, " is outside 0..1024"));
  }
  const std::string arenas = conv1d::ApplyMallocArenaMax(arena_max);
  const int64_t trim_threshold = absl::GetFlag(FLAGS_malloc_trim_threshold);
  if (trim_threshold < 0 || trim_threshold > conv1d::kMaxMallocTrimThreshold) {
    return kErrors.UsageError(absl::StrCat("--malloc_trim_threshold: ", trim_threshold,
                                           " is outside 0..", conv1d::kMaxMallocTrimThreshold));
  }
  const std::string trim = conv1d::ApplyMallocTrimThreshold(trim_threshold);

  // Whole milliseconds, as gRPC takes them; a positive age below 1 ms would
  // round to 0, which means "never", so it is refused instead.
  int64_t connection_age_ms[2] = {0, 0};
  const std::pair<const char*, double> connection_flags[2] = {
      {"max_connection_age_s", absl::GetFlag(FLAGS_max_connection_age_s)},
      {"max_connection_age_grace_s", absl::GetFlag(FLAGS_max_connection_age_grace_s)}};
  for (int i = 0; i < 2; ++i) {
    const auto& [name, seconds] = connection_flags[i];
    const int64_t max_s = conv1d::kMaxConnectionAgeMs / 1000;
    if (!(seconds == 0 || (seconds >= 0.001 && seconds <= static_cast<double>(max_s)))) {
      return kErrors.UsageError(absl::StrCat("--", name, ": ", seconds,
                                             " is neither 0 nor within 0.001..", max_s));
    }
    connection_age_ms[i] = std::llround(seconds * 1000);
  }

  conv1d::ServerOptions options;
  options.listen_address = absl::GetFlag(FLAGS_listen);
  options.metrics_listen_address = absl::GetFlag(FLAGS_metrics_listen);
  options.backend.name = absl::GetFlag(FLAGS_backend);
  options.backend.threads = absl::GetFlag(FLAGS_threads);
  options.backend.lanes = absl::GetFlag(FLAGS_lanes);
  options.backend.lane_buffer_bytes = absl::GetFlag(FLAGS_lane_buffer_bytes);
  options.backend.weight_cache_bytes = absl::GetFlag(FLAGS_weight_cache_bytes);
  options.backend.host_pool_bytes = absl::GetFlag(FLAGS_host_pool_bytes);
  options.backend.inject_fault = absl::GetFlag(FLAGS_gpu_inject_fault);
  options.host_tensor_min_bytes = absl::GetFlag(FLAGS_host_tensor_min_bytes);
  const std::string host_tensors = absl::GetFlag(FLAGS_host_tensors);
  if (host_tensors == "auto") {
    options.host_tensors = conv1d::HostTensors::kAuto;
  } else if (host_tensors == "always") {
    options.host_tensors = conv1d::HostTensors::kAlways;
  } else if (host_tensors == "never") {
    options.host_tensors = conv1d::HostTensors::kNever;
  } else {
    return kErrors.UsageError(absl::StrCat("--host_tensors: '", host_tensors,
                                           "' is not auto, always or never"));
  }
  for (absl::string_view d : absl::StrSplit(absl::GetFlag(FLAGS_devices), ',', absl::SkipEmpty())) {
    int index = 0;
    if (!absl::SimpleAtoi(d, &index) || index < 0) {
      return kErrors.UsageError(absl::StrCat("--devices: '", d, "' is not a device index"));
    }
    options.backend.devices.push_back(index);
  }
  options.scheduler.max_batch_bytes = absl::GetFlag(FLAGS_max_batch_bytes);
  options.scheduler.max_batch_requests = absl::GetFlag(FLAGS_max_batch_requests);
  options.scheduler.max_queue_delay_us = absl::GetFlag(FLAGS_max_queue_delay_us);
  options.scheduler.max_queued_requests = absl::GetFlag(FLAGS_max_queued_requests);
  options.scheduler.completion_threads = absl::GetFlag(FLAGS_completion_threads);
  options.scheduler.completion_chunk = absl::GetFlag(FLAGS_completion_chunk);
  options.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  options.max_request_bytes = absl::GetFlag(FLAGS_max_request_bytes);
  options.max_weight_bytes = absl::GetFlag(FLAGS_max_weight_bytes);
  options.shared_memory.max_regions = absl::GetFlag(FLAGS_shm_max_regions);
  options.oip_require_all_inputs = absl::GetFlag(FLAGS_oip_require_all_inputs);
  options.session_state_bytes = absl::GetFlag(FLAGS_session_state_bytes);
  options.max_sessions = absl::GetFlag(FLAGS_max_sessions);
  options.session_idle_timeout_s = absl::GetFlag(FLAGS_session_idle_timeout_s);
  options.max_inflight_bytes = absl::GetFlag(FLAGS_max_inflight_bytes);
  options.drain_grace = absl::Milliseconds(drain_grace_ms);
  options.access_log = access_log;
  options.tls.cert_file = absl::GetFlag(FLAGS_tls_cert);
  options.tls.key_file = absl::GetFlag(FLAGS_tls_key);
  options.tls.client_ca_file = absl::GetFlag(FLAGS_tls_client_ca);
  options.tls.reload_interval_s = absl::GetFlag(FLAGS_tls_reload_interval_s);
  options.metrics_tls.cert_file = absl::GetFlag(FLAGS_metrics_tls_cert);
  options.metrics_tls.key_file = absl::GetFlag(FLAGS_metrics_tls_key);
  options.metrics_tls.client_ca_file = absl::GetFlag(FLAGS_metrics_tls_client_ca);
  std::shared_ptr<conv1d::Authenticator> auth;
  if (const std::string tokens = absl::GetFlag(FLAGS_auth_tokens_file); !tokens.empty()) {
    absl::StatusOr<std::unique_ptr<conv1d::Authenticator>> made =
        conv1d::Authenticator::Create(tokens);
    if (!made.ok()) return kErrors.UsageError(absl::StrCat("--", made.status().message()));
    auth = std::move(*made);
  }
  options.auth = auth;
  options.auth_health_open = absl::GetFlag(FLAGS_auth_health_open);
  options.max_connection_age_ms = connection_age_ms[0];
  options.max_connection_age_grace_ms = connection_age_ms[1];

  absl::StatusOr<std::unique_ptr<conv1d::Server>> server =
      conv1d::Server::Create(std::move(options));
  if (!server.ok()) {
    if (absl::IsInvalidArgument(server.status())) {
      return kErrors.UsageError(server.status().message());
    }
    spdlog::critical("cannot start: {}", server.status().ToString());
    return 1;
  }
  const conv1d::Server& s = **server;
  const std::string metrics =
      s.metrics_port() > 0 ? absl::StrCat("port ", s.metrics_port()) : "off";
  spdlog::info(
      "conv1d_server {} serving: backend={} devices=[{}] grpc={} (port {}) "
      "metrics={} ({}) lanes={} threads={} max_batch_bytes={} "
      "max_batch_requests={} max_queue_delay_us={} max_queued_requests={} "
      "completion_threads={} completion_chunk={} host_pool_bytes={} host_tensors={} host_tensor_min_bytes={} "
      "max_message_bytes={} max_request_bytes={} max_inflight_bytes={} drain_timeout_s={} "
      "drain_grace_ms={} max_connection_age_s={} max_connection_age_grace_s={} "
      "log_level={} log_format={} access_log={} malloc_arena_max={} malloc_trim_threshold={}",
      conv1d::ServerVersion(), s.backend().name(), absl::StrJoin(s.devices(), ", "),
      absl::GetFlag(FLAGS_listen), s.bound_port(), absl::GetFlag(FLAGS_metrics_listen),
      metrics, s.backend().num_lanes(), absl::GetFlag(FLAGS_threads),
      absl::GetFlag(FLAGS_max_batch_bytes), absl::GetFlag(FLAGS_max_batch_requests),
      absl::GetFlag(FLAGS_max_queue_delay_us), absl::GetFlag(FLAGS_max_queued_requests),
      absl::GetFlag(FLAGS_completion_threads), absl::GetFlag(FLAGS_completion_chunk),
      absl::GetFlag(FLAGS_host_pool_bytes),
      absl::GetFlag(FLAGS_host_tensors), absl::GetFlag(FLAGS_host_tensor_min_bytes), absl::GetFlag(FLAGS_max_message_bytes), absl::GetFlag(FLAGS_max_request_bytes),
      s.max_inflight_bytes(),
      drain_timeout_s, drain_grace_ms, absl::GetFlag(FLAGS_max_connection_age_s),
      absl::GetFlag(FLAGS_max_connection_age_grace_s), level_name, format_name,
      access_log_path.empty() ? "off" : access_log_path, arenas, trim);
  spdlog::info("security: tls={} client_ca={} metrics_tls={} auth={} auth_health_open={}",
               absl::GetFlag(FLAGS_tls_cert).empty() ? "off" : absl::GetFlag(FLAGS_tls_cert),
               absl::GetFlag(FLAGS_tls_client_ca).empty() ? "off"
                                                          : absl::GetFlag(FLAGS_tls_client_ca),
               absl::GetFlag(FLAGS_metrics_tls_cert).empty() ? "off" : "on",
               auth == nullptr ? "off"
                               : absl::StrCat(auth->num_tokens(), " tokens from ",
                                              auth->tokens_file()),
               absl::GetFlag(FLAGS_auth_health_open));

  int signal_number = 0;
  for (;;) {
    sigwait(&blocked, &signal_number);
    if (signal_number != SIGHUP) break;
    if (auth == nullptr) {
      spdlog::info("SIGHUP: no --auth_tokens_file to re-read");
      continue;
    }
    if (absl::Status s = auth->Reload(); s.ok()) {
      spdlog::info("SIGHUP: re-read {}: {} tokens", auth->tokens_file(), auth->num_tokens());
    } else {
      spdlog::error("SIGHUP: keeping the previous tokens: {}", std::string(s.message()));
    }
  }
  spdlog::info("received {}; draining for at most {} s",
               signal_number == SIGTERM ? "SIGTERM" : "SIGINT", drain_timeout_s);
  std::thread([drain_signals] {
    int again = 0;
    sigwait(&drain_signals, &again);
    spdlog::warn("second signal during the drain; exiting now");
    std::_Exit(1);
  }).detach();

  // Calls still running at the deadline are cancelled, but a batch already
  // inside the backend cannot be; this bounds the exit even then.
  const absl::Duration hard_limit = absl::Seconds(drain_timeout_s) + absl::Seconds(10);
  std::thread([hard_limit] {
    absl::SleepFor(hard_limit);
    spdlog::error("drain still running after {}; exiting now",
                  absl::FormatDuration(hard_limit));
    std::_Exit(1);
  }).detach();
  (*server)->Shutdown(absl::Now() + absl::Seconds(drain_timeout_s));
  server->reset();
  if (access_log != nullptr && access_log->dropped_lines() > 0) {
    spdlog::warn("access log: {} lines dropped (the writer fell {} lines behind)",
                 access_log->dropped_lines(), conv1d::AccessLog::kQueueLines);
  }
  // Writes out the access log's queued lines.
  access_log.reset();
  spdlog::info("stopped");
  return 0;
}
