#include "server/frontend/server.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "grpc/grpc.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/resource_quota.h"
#include "server/core/clock.h"
#include "server/frontend/conv1d_service.h"
#include "server/frontend/listen_address.h"
#include "server/frontend/oip_service.h"
#include "server/frontend/request_submit.h"
#include "server/metrics/prometheus_observer.h"
#include "spdlog/spdlog.h"

#ifndef CONV1D_VERSION
#define CONV1D_VERSION "0.0.0"
#endif
#ifndef CONV1D_GIT_SHA
#define CONV1D_GIT_SHA "unknown"
#endif

namespace conv1d {
namespace {

constexpr char kServiceName[] = "conv1d.v1.Conv1d";
constexpr char kOipServiceName[] = "inference.GRPCInferenceService";

absl::Status CheckOptions(const ServerOptions& o) {
  if (absl::Status s = CheckListenAddress("listen", o.listen_address); !s.ok()) return s;
  if (!o.metrics_listen_address.empty() && o.observer == nullptr) {
    if (absl::Status s = CheckListenAddress("metrics_listen", o.metrics_listen_address);
        !s.ok()) {
      return s;
    }
  }
  if (o.auth != nullptr && !o.auth_health_open && !o.tls.enabled()) {
    return absl::InvalidArgumentError(
        "--auth_health_open=false: needs --tls_cert and --tls_key (the check that "
        "covers health and reflection runs on TLS listeners only)");
  }
  if (o.max_message_bytes < kMinMessageBytes || o.max_message_bytes > kMaxMessageBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_message_bytes: ", o.max_message_bytes, " is outside ", kMinMessageBytes,
        "..", kMaxMessageBytes, " (256 MiB .. 2 GiB - 1)"));
  }
  if (o.max_request_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_request_bytes: ", o.max_request_bytes, " is negative"));
  }
  if (o.max_weight_bytes < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_weight_bytes: ", o.max_weight_bytes, " must be >= 1"));
  }
  if (o.max_inflight_bytes != 0 && (o.max_inflight_bytes < kMinInflightBytes ||
                                    o.max_inflight_bytes > kMaxInflightBytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_inflight_bytes: ", o.max_inflight_bytes, " is neither 0 nor within ",
        kMinInflightBytes, "..", kMaxInflightBytes));
  }
  if (o.host_tensor_min_bytes < -1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "host_tensor_min_bytes: ", o.host_tensor_min_bytes, " must be >= -1"));
  }
  if (o.backend.host_pool_bytes < -1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "host_pool_bytes: ", o.backend.host_pool_bytes, " must be >= -1"));
  }
  if (o.backend.threads < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("threads: ", o.backend.threads, " is negative"));
  }
  if (o.backend.lanes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("lanes: ", o.backend.lanes, " is negative"));
  }
  if (o.drain_grace < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("drain_grace: must not be negative");
  }
  if (o.max_connection_age_ms < 0 || o.max_connection_age_ms > kMaxConnectionAgeMs) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_connection_age_ms: ", o.max_connection_age_ms, " is outside 0..",
        kMaxConnectionAgeMs));
  }
  if (o.max_connection_age_grace_ms < 0 ||
      o.max_connection_age_grace_ms > kMaxConnectionAgeMs) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_connection_age_grace_ms: ", o.max_connection_age_grace_ms,
        " is outside 0..", kMaxConnectionAgeMs));
  }
  return absl::OkStatus();
}

}  // namespace

std::string ServerVersion() {
  return absl::StrCat(CONV1D_VERSION, " (", CONV1D_GIT_SHA, ")");
}

absl::StatusOr<std::unique_ptr<Server>> Server::Create(ServerOptions options) {
  if (absl::Status s = CheckOptions(options); !s.ok()) return s;
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      MakeServerCredentials(options.tls);
  if (!credentials.ok()) return credentials.status();
  if (absl::Status s = CheckTlsFiles(options.metrics_tls, "metrics_tls_"); !s.ok()) return s;
  std::unique_ptr<Server> server(new Server());
  server->drain_grace_ = options.drain_grace;

  // The observer exists before the backend so that a backend can report
  // from its start; it learns the backend's name once that exists.
  PrometheusObserver* metrics = nullptr;
  if (options.observer != nullptr) {
    server->observer_ = options.observer;
  } else if (!options.metrics_listen_address.empty()) {
    MetricsOptions metrics_options;
    metrics_options.listen_address = options.metrics_listen_address;
    metrics_options.version = CONV1D_VERSION;
    metrics_options.git_sha = CONV1D_GIT_SHA;
    metrics_options.tls_cert_file = options.metrics_tls.cert_file;
    metrics_options.tls_key_file = options.metrics_tls.key_file;
    metrics_options.tls_client_ca_file = options.metrics_tls.client_ca_file;
    absl::StatusOr<std::unique_ptr<PrometheusObserver>> prom =
        PrometheusObserver::Create(metrics_options);
    if (!prom.ok()) return prom.status();
    metrics = prom->get();
    server->metrics_port_ = metrics->bound_port();
    server->owned_observer_ = std::move(*prom);
    server->observer_ = metrics;
  } else {
    server->owned_observer_ = std::make_unique<NoopObserver>();
    server->observer_ = server->owned_observer_.get();
  }

  if (options.backend_instance != nullptr) {
    server->backend_ = std::move(options.backend_instance);
  } else {
    options.backend.observer = server->observer_;
    absl::StatusOr<std::unique_ptr<Backend>> backend = MakeBackend(options.backend);
    if (!backend.ok()) return backend.status();
    server->backend_ = std::move(*backend);
  }
  if (metrics != nullptr) {
    metrics->SetBuildInfo(server->backend_->name(), server->backend_->devices());
  }

  server->registry_ =
      std::make_unique<WeightRegistry>(server->observer_, options.max_weight_bytes);
  StateSlotsOptions slot_options;
  slot_options.slot_bytes = options.session_state_bytes;
  slot_options.num_slots = options.max_sessions;
  if (absl::Status s = ValidateStateSlotsOptions(slot_options); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<StateSlots>> slots =
      server->backend_->CreateStateSlots(slot_options);
  if (slots.ok()) {
    server->state_slots_ = std::move(*slots);
    SessionManagerOptions session_options;
    session_options.idle_timeout_s = options.session_idle_timeout_s;
    absl::StatusOr<std::unique_ptr<SessionManager>> manager = SessionManager::Create(
        session_options, server->state_slots_.get(),
        options.session_clock != nullptr ? options.session_clock : Clock::Real(),
        server->observer_);
    if (!manager.ok()) return manager.status();
    server->session_manager_ = std::move(*manager);
  } else if (absl::IsUnimplemented(slots.status())) {
    spdlog::info("decode sessions off: {}", std::string(slots.status().message()));
  } else {
    return slots.status();
  }

  absl::StatusOr<std::unique_ptr<Scheduler>> scheduler = Scheduler::Create(
      options.scheduler, server->backend_.get(), Clock::Real(), server->observer_);
  if (!scheduler.ok()) return scheduler.status();
  server->scheduler_ = std::move(*scheduler);

  AdmissionOptions admission_options;
  admission_options.max_inflight_bytes = options.max_inflight_bytes;
  absl::StatusOr<std::unique_ptr<ByteAdmission>> admission =
      ByteAdmission::Create(admission_options);
  if (!admission.ok()) return admission.status();
  server->admission_ = std::move(*admission);

  ServiceOptions service_options;
  service_options.admission = server->admission_;
  service_options.version = ServerVersion();
  service_options.access_log = options.access_log;
  service_options.auth = options.auth;
  service_options.host_tensor_min_bytes = options.host_tensor_min_bytes;
  service_options.host_tensors = options.host_tensors;
  service_options.limits.max_request_bytes = options.max_request_bytes > 0
                                                 ? options.max_request_bytes
                                                 : options.max_message_bytes;
  // The backend page-locks system regions and opens device regions
  // (memory_access.h) unless the options bring their own.
  SharedMemoryRegistryOptions shm_options = options.shared_memory;
  if (shm_options.pinner == nullptr) shm_options.pinner = server->backend_->host_memory_pinner();
  if (shm_options.importer == nullptr) {
    shm_options.importer = server->backend_->device_memory_importer();
  }
  absl::StatusOr<std::unique_ptr<SharedMemoryRegistry>> shm =
      SharedMemoryRegistry::Create(shm_options);
  if (!shm.ok()) return shm.status();
  server->shm_registry_ = std::move(*shm);
  // Both protocols submit through one submitter: one admission, one task-id
  // sequence, one scheduler.
  const BackendInfo backend_info = BackendInfo::Of(*server->backend_);
  server->submitter_ = std::make_unique<RequestSubmitter>(
      service_options.limits, backend_info.limits, server->scheduler_.get(),
      server->observer_);
  server->service_ = std::make_unique<Conv1dService>(
      service_options, server->submitter_.get(), server->scheduler_.get(),
      server->registry_.get(), server->shm_registry_.get(), backend_info, server->observer_,
      server->session_manager_.get());
  OipServiceOptions oip_options;
  oip_options.version = service_options.version;
  oip_options.access_log = options.access_log;
  oip_options.max_queue_delay_us = options.scheduler.max_queue_delay_us;
  oip_options.ready = [s = server.get()] { return s->serving(); };
  oip_options.require_all_inputs = options.oip_require_all_inputs;
  oip_options.auth = service_options.auth;
  // The same rule as Conv1dService's for tensors in host buffers.
  oip_options.host_tensor_min_bytes =
      options.host_tensors == HostTensors::kAlways ||
              (options.host_tensors == HostTensors::kAuto &&
               backend_info.host_buffers->page_locked())
          ? options.host_tensor_min_bytes
          : -1;
  server->oip_service_ = std::make_unique<OipService>(
      std::move(oip_options), server->submitter_.get(), server->registry_.get(),
      server->shm_registry_.get(), backend_info, server->observer_,
      server->session_manager_.get());

  // Both are process-wide switches read by the next BuildAndStart.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  if (options.auth != nullptr && !options.auth_health_open) {
    (*credentials)->SetAuthMetadataProcessor(
        std::make_shared<TokenAuthProcessor>(options.auth.get()));
  }
  builder.AddListeningPort(options.listen_address, *credentials, &server->bound_port_);
  // gRPC sets SO_REUSEPORT by default, which lets a second server bind the
  // same port and take half of its connections.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(static_cast<int>(options.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(options.max_message_bytes));
  // Under pressure the transport shrinks its flow-control windows and, past
  // the quota, cancels streams (RESOURCE_EXHAUSTED) instead of buffering more.
  grpc::ResourceQuota quota("conv1d_server");
  quota.Resize(static_cast<size_t>(server->admission_->max_inflight_bytes()));
  builder.SetResourceQuota(quota);
  if (options.max_connection_age_ms > 0) {
    // gRPC's own default (no argument) is an unlimited age and grace.
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS,
                               static_cast<int>(options.max_connection_age_ms));
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS,
                               static_cast<int>(options.max_connection_age_grace_ms));
  }
  builder.RegisterService(server->service_.get());
  builder.RegisterService(server->oip_service_.get());
  server->grpc_server_ = builder.BuildAndStart();
  if (server->grpc_server_ == nullptr || server->bound_port_ == 0) {
    if (server->grpc_server_ != nullptr) server->grpc_server_->Shutdown();
    server->grpc_server_.reset();
    const std::string why = BindError(options.listen_address);
    return absl::InvalidArgumentError(
        absl::StrCat("--listen: cannot serve gRPC on ", options.listen_address,
                     why.empty() ? "" : absl::StrCat(": ", why)));
  }
  server->SetServing(true);
  server->health_watch_ = std::thread([s = server.get()] { s->WatchBackendHealth(); });
  return server;
}

void Server::WatchBackendHealth() {
  while (!stop_health_watch_.WaitForNotificationWithTimeout(absl::Milliseconds(500))) {
    const absl::Status health = backend_->Health();
    if (health.ok()) continue;
    spdlog::critical("backend {} can no longer serve, health NOT_SERVING: {}",
                     backend_->name(), health.ToString());
    SetServing(false);
    return;
  }
}

Server::~Server() { Shutdown(absl::Now() + absl::Seconds(5)); }

bool Server::serving() const {
  absl::MutexLock lock(&mu_);
  return serving_;
}

void Server::SetServing(bool serving) {
  {
    absl::MutexLock lock(&mu_);
    serving_ = serving;
  }
  grpc::HealthCheckServiceInterface* health = grpc_server_->GetHealthCheckService();
  if (health != nullptr) {
    health->SetServingStatus("", serving);
    health->SetServingStatus(kServiceName, serving);
    health->SetServingStatus(kOipServiceName, serving);
  }
  observer_->OnServingChanged(serving);
}

void Server::Shutdown(absl::Time deadline) {
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_started_) {
      mu_.Await(absl::Condition(&shutdown_done_));
      return;
    }
    shutdown_started_ = true;
  }
  if (grpc_server_ == nullptr) {  // Create failed part-way
    absl::MutexLock lock(&mu_);
    shutdown_done_ = true;
    return;
  }
  stop_health_watch_.Notify();
  if (health_watch_.joinable()) health_watch_.join();
  SetServing(false);
  spdlog::info("draining: health NOT_SERVING; {} requests queued",
               scheduler_->queued_requests());
  // Keep accepting for the grace period so that clients which have not seen
  // NOT_SERVING yet are still answered.
  const absl::Time grace_end = std::min(absl::Now() + drain_grace_, deadline);
  absl::SleepFor(std::max(grace_end - absl::Now(), absl::ZeroDuration()));
  // Streams are never "in flight" to completion: each gets its state and
  // UNAVAILABLE now, so its client resumes elsewhere with nothing lost.
  const int streams = service_->DrainSessionStreams();
  if (streams > 0) spdlog::info("draining: {} Decode streams sent their state", streams);
  // Stops accepting; waits for in-flight calls until the deadline, then
  // cancels them (the scheduler drops cancelled tasks before compute).
  grpc_server_->Shutdown(absl::ToChronoTime(deadline));
  spdlog::debug("gRPC listener closed, every call finished");
  scheduler_->Shutdown(std::max(deadline - absl::Now(), absl::ZeroDuration()));
  spdlog::debug("scheduler drained");
  grpc_server_->Wait();
  const SchedulerStats stats = scheduler_->stats();
  spdlog::info("drained: {} completed, {} dropped (deadline {}, cancelled {}, shutdown {}), {} failed",
               stats.completed,
               stats.dropped_deadline + stats.dropped_cancelled + stats.dropped_shutdown,
               stats.dropped_deadline, stats.dropped_cancelled, stats.dropped_shutdown,
               stats.failed);
  absl::MutexLock lock(&mu_);
  shutdown_done_ = true;
}

}  // namespace conv1d
