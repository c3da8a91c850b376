// Server: one running conv1d service — backend, weight registry, shared-memory
// registry, scheduler, metrics observer and the gRPC server (the conv1d.v1
// Conv1d service, the Open Inference Protocol's GRPCInferenceService,
// grpc.health.v1, server reflection) — assembled from ServerOptions.
//
// Used by the conv1d_server binary (server/main.cc) and by the end-to-end
// tests, which run it in-process on 127.0.0.1:0 and read bound_port().
//
// Lifecycle: Create() builds everything and starts serving; health reports
// SERVING from then on. Shutdown() drains: health NOT_SERVING first, then
// (after drain_grace) every open Decode stream gets its session's state and
// ends with UNAVAILABLE, the listener stops accepting, in-flight calls finish
// (calls still running at the deadline are cancelled), the scheduler drains
// and its lanes stop. The destructor shuts down if that has not happened.
//
// Thread-safety: every public method is thread-safe; Shutdown may be called
// from any thread (not from a gRPC handler) and more than once.
#ifndef CONV1D_SERVER_FRONTEND_SERVER_H_
#define CONV1D_SERVER_FRONTEND_SERVER_H_

#include <cstdint>
#include <memory>
#include <thread>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "server/core/admission.h"
#include "server/core/backend.h"
#include "server/core/observer.h"
#include "server/core/clock.h"
#include "server/core/scheduler.h"
#include "server/core/shm_registry.h"
#include "server/core/session_manager.h"
#include "server/core/state_slots.h"
#include "server/core/weight_registry.h"
#include "server/frontend/auth.h"
#include "server/frontend/backend_factory.h"
#include "server/frontend/tls.h"
#include "server/frontend/wire_tensors.h"
#include "server/logging/access_log.h"

namespace conv1d {

class Conv1dService;
class OipService;
class RequestSubmitter;

inline constexpr int64_t kMinMessageBytes = int64_t{256} << 20;
inline constexpr int64_t kMaxMessageBytes = 0x7fffffff;  // gRPC's int limit
// gRPC takes connection ages as an int of milliseconds (about 24.8 days).
inline constexpr int64_t kMaxConnectionAgeMs = 0x7fffffff;

struct ServerOptions {
  // host:port of the gRPC listener; port 0 picks a free one (bound_port()).
  // Loopback by default: a container or host that serves others passes
  // 0.0.0.0 (or [::]) explicitly. The port is never shared (no
  // SO_REUSEPORT): a taken port fails Create.
  std::string listen_address = "127.0.0.1:50051";
  // host:port of the Prometheus endpoint; empty serves no metrics.
  std::string metrics_listen_address = "127.0.0.1:8002";
  // TLS (and with a client CA, mTLS) of the gRPC listener; plaintext when
  // empty (tls.h).
  TlsOptions tls;
  // TLS of the metrics endpoint (same fields; reload_interval_s unused:
  // its certificate and key are re-read when their files change).
  TlsOptions metrics_tls;
  // Bearer-token authentication (auth.h); null: every call is allowed.
  // Shared so that the owner (conv1d_server's SIGHUP handler) can Reload it.
  std::shared_ptr<const Authenticator> auth;
  // With `auth`: whether grpc.health.v1 and reflection answer without a
  // token (probes). false needs `tls` (gRPC runs the check that covers
  // every service on TLS listeners only).
  bool auth_health_open = true;
  // Which backend, its threads and lanes (backend_factory.h).
  BackendChoice backend;
  SchedulerOptions scheduler;
  // gRPC max receive and send message size; 256 MiB .. 2 GiB - 1.
  int64_t max_message_bytes = int64_t{1} << 30;
  // Bytes one compute request may move (inputs plus outputs); 0 means
  // max_message_bytes. >= 0.
  int64_t max_request_bytes = 0;
  // Sum of registered weight bytes, each set counted with its bookkeeping
  // (WeightSet::footprint_bytes).
  int64_t max_weight_bytes = int64_t{16} << 30;
  // Registered shared-memory regions (shm_registry.h); a null pinner or
  // importer is taken from the backend.
  SharedMemoryRegistryOptions shared_memory;
  // Inference protocol: every model input is required (OipServiceOptions).
  bool oip_require_all_inputs = false;
  // Bytes of calls (received messages and their responses) held at once;
  // beyond it calls are refused RESOURCE_EXHAUSTED before they are parsed
  // (server/core/admission.h). Also the size of gRPC's resource quota, which
  // bounds the transport's receive buffers. 0 = a quarter of physical memory
  // (or of the cgroup's limit); else 1 MiB .. 2^62.
  int64_t max_inflight_bytes = 0;
  // Compute-request tensors (and outputs) of at least this many bytes live in
  // the backend's host buffers instead of protobuf strings, for backends
  // whose buffers are page-locked (kAuto), any backend (kAlways) or none
  // (kNever); host_tensor_min_bytes -1 also means never.
  int64_t host_tensor_min_bytes = int64_t{4} << 10;
  HostTensors host_tensors = HostTensors::kAuto;
  // How long health reports NOT_SERVING before the listener stops accepting,
  // so that load balancers stop sending first. Bounded by the drain deadline.
  absl::Duration drain_grace = absl::Milliseconds(500);
  // One line per finished RPC (server/logging/access_log.h); null: none.
  std::shared_ptr<AccessLog> access_log;
  // After this long a client connection is sent GOAWAY, so that clients
  // reconnect and re-resolve: long-lived channels then spread over replicas
  // added since they connected. 0 = connections live for ever. 0 ..
  // kMaxConnectionAgeMs; gRPC adds +-10 % jitter so that connections made
  // together do not all close together.
  int64_t max_connection_age_ms = 0;
  // How long calls still running on a connection past its age may continue
  // before the connection is closed under them. The default matches the
  // drain timeout, so a rotation cuts no call that a drain would let finish.
  // 0 .. kMaxConnectionAgeMs; unused while max_connection_age_ms is 0.
  int64_t max_connection_age_grace_ms = 30000;

  // Decode sessions (docs/sessions.md): bytes of one state slot (the largest
  // session state [B, D, state_len + max_draft_tokens] served), slots in the
  // pool (the most sessions open at once; a full pool refuses new ones), and
  // how long an idle session lives (0: for ever). The pool is taken at start
  // from the backend; a backend without session support serves none.
  int64_t session_state_bytes = int64_t{256} << 10;
  int32_t max_sessions = 256;
  int64_t session_idle_timeout_s = 300;
  // Clock of the session idle timeouts; null: the real clock. Not owned.
  Clock* session_clock = nullptr;

  // Test hooks. A non-null `backend_instance` is used instead of building
  // `backend`; a non-null `observer` (not owned, must outlive the Server)
  // replaces the metrics observer and metrics_listen_address is ignored.
  std::unique_ptr<Backend> backend_instance;
  Observer* observer = nullptr;
};

// "0.1.0 (<git sha>)".
std::string ServerVersion();

class Server {
 public:
  // INVALID_ARGUMENT naming the option for a bad value (also for a listen
  // address that is not host:port with a port in 0..65535, and for a port
  // that cannot be bound, e.g. taken); the backend's or the scheduler's
  // error.
  static absl::StatusOr<std::unique_ptr<Server>> Create(ServerOptions options);
  ~Server();

  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // The gRPC port actually bound.
  int bound_port() const { return bound_port_; }
  // The metrics port actually bound; 0 when not serving metrics.
  int metrics_port() const { return metrics_port_; }
  const Backend& backend() const { return *backend_; }
  std::vector<std::string> devices() const { return backend_->devices(); }
  WeightRegistry* registry() { return registry_.get(); }
  SharedMemoryRegistry* shared_memory() { return shm_registry_.get(); }
  // Null when the backend serves no sessions.
  SessionManager* sessions() { return session_manager_.get(); }
  // The admission bound in effect, and the bytes held now.
  int64_t max_inflight_bytes() const { return admission_->max_inflight_bytes(); }
  int64_t inflight_bytes() const { return admission_->inflight_bytes(); }
  SchedulerStats scheduler_stats() const { return scheduler_->stats(); }
  int64_t queued_requests() const { return scheduler_->queued_requests(); }
  // False once Shutdown has begun.
  bool serving() const;

  // Drains as described above and returns when every call has finished and
  // the scheduler's lanes have stopped. Calls not finished by `deadline` are
  // cancelled. Idempotent; later callers wait for the first to finish.
  void Shutdown(absl::Time deadline);

 private:
  Server() = default;
  void SetServing(bool serving);

  absl::Duration drain_grace_;
  int bound_port_ = 0;
  int metrics_port_ = 0;
  // Declaration order is destruction order reversed: the observer outlives
  // everything that reports to it, the backend outlives the scheduler.
  std::unique_ptr<Observer> owned_observer_;
  Observer* observer_ = nullptr;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<WeightRegistry> registry_;
  std::unique_ptr<SharedMemoryRegistry> shm_registry_;
  // Session steps in the scheduler use both: they outlive it.
  std::unique_ptr<StateSlots> state_slots_;
  std::unique_ptr<SessionManager> session_manager_;
  // Shared with the service; outlives every call's reservation, which the
  // scheduler's tasks and gRPC's send buffers may hold.
  std::shared_ptr<ByteAdmission> admission_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<RequestSubmitter> submitter_;
  std::unique_ptr<Conv1dService> service_;
  std::unique_ptr<OipService> oip_service_;
  std::unique_ptr<grpc::Server> grpc_server_;
  // Polls Backend::Health() and turns health NOT_SERVING (sticky) when the
  // backend can no longer serve, e.g. after an unrecoverable device error.
  void WatchBackendHealth();
  absl::Notification stop_health_watch_;
  std::thread health_watch_;

  mutable absl::Mutex mu_;
  bool serving_ ABSL_GUARDED_BY(mu_) = false;
  bool shutdown_started_ ABSL_GUARDED_BY(mu_) = false;
  bool shutdown_done_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace conv1d

#endif  // CONV1D_SERVER_FRONTEND_SERVER_H_
