// OipService: the Open Inference Protocol (KServe v2 gRPC, package
// `inference`, with Triton's extensions) as a second frontend over the same
// core as conv1d.v1: one scheduler, one weight registry, one validation.
//
// Models: conv1d_forward, conv1d_backward, conv1d_update (oip_models.h).
// ModelInfer and ModelStreamInfer translate each request (oip_request.h) and
// submit it through the RequestSubmitter that Conv1dService uses, so requests
// of both protocols fuse into the same backend launches; the call finishes
// from the task's on_done on a lane thread, never blocking a reactor. The
// stream answers each request with one ModelStreamInferResponse, in
// completion order, a failed request with its error_message (the stream
// stays open), and ends when the client has half-closed and every answer
// is written.
//
// System shared memory: SystemSharedMemoryRegister/Status/Unregister drive the
// server's SharedMemoryRegistry (shm_registry.h: unregistering a region an
// in-flight request holds fails with FAILED_PRECONDITION).
// CudaSharedMemoryRegister/Status/Unregister do the same for device memory
// exported by a co-located process (oip_device_regions.h); on a backend that
// cannot use device memory registration is FAILED_PRECONDITION naming it.
// A region belongs to the principal that registered it (ownership.h): the
// Status calls list, and Unregister reaches, only the caller's own regions
// (an admin's: every region, though Unregister with an empty name releases
// only its own), and requests read and write only the caller's regions.
//
// Sequences: requests of conv1d_update with sequence parameters
// (sequence_id, sequence_start, sequence_end, ...) step decode sessions
// (oip_sequences.h); without them, decode state travels in conv_state.
//
// Errors go through status_mapping.h; every RPC reports to the observer
// (method names as in the protocol, e.g. "ModelInfer") and writes the access
// log line, with the x-request-id trailer as Conv1dService does.
//
// ModelInfer is registered raw: its large raw_input_contents are received
// straight into the server's host buffers, and large outputs sent from them
// (oip_wire.h), as conv1d.v1 does with host_tensor_min_bytes.
//
// Thread-safety: handlers run concurrently on gRPC threads; the statistics
// are atomics. Everything passed to the constructor is not owned and must
// outlive the grpc::Server the service is registered with.
#ifndef CONV1D_SERVER_FRONTEND_OIP_SERVICE_H_
#define CONV1D_SERVER_FRONTEND_OIP_SERVICE_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "inference/grpc_predict_v2.grpc.pb.h"
#include "server/core/backend.h"
#include "server/core/observer.h"
#include "server/core/shm_registry.h"
#include "server/core/task.h"
#include "server/core/weight_registry.h"
#include "server/frontend/auth.h"
#include "server/frontend/oip_request.h"
#include "server/frontend/oip_sequences.h"
#include "server/frontend/request_log.h"
#include "server/frontend/request_submit.h"
#include "server/logging/access_log.h"

namespace conv1d {

struct OipServiceOptions {
  // ServerMetadata's version.
  std::string version;
  // One line per finished call; null: no access log.
  std::shared_ptr<AccessLog> access_log;
  // Reported in ModelConfig's dynamic_batching.
  int64_t max_queue_delay_us = 0;
  // raw_input_contents entries and outputs of at least this many bytes live
  // in host buffers from BackendInfo::host_buffers rather than protobuf
  // strings; -1: never (ServiceOptions::host_tensor_min_bytes in effect).
  int64_t host_tensor_min_bytes = -1;
  // Bearer-token authentication (auth.h), as for conv1d.v1: every call
  // needs a valid token (UNAUTHENTICATED otherwise) and a weights_name must
  // be a set the principal may use. Null: none.
  std::shared_ptr<const Authenticator> auth;
  // ServerReady / ModelReady; empty: always ready.
  std::function<bool()> ready;
  // Every input of a model is required (weights_name is then refused) and
  // ModelConfig marks none optional: for clients that cannot send models
  // with optional inputs (perf_analyzer --shared-memory). false: only x,
  // dout and conv_state are required.
  bool require_all_inputs = false;
};

// Every method as a callback method, ModelInfer raw (ByteBuffer in and out).
using OipServiceBase = inference::GRPCInferenceService::WithRawCallbackMethod_ModelInfer<
    inference::GRPCInferenceService::CallbackService>;

class OipService final : public OipServiceBase {
 public:
  // REQUIRES: every pointer non-null and outliving the service, except
  // `sessions`: null when the backend serves no decode sessions (sequence
  // requests then answer UNIMPLEMENTED).
  OipService(OipServiceOptions options, RequestSubmitter* submitter,
             WeightRegistry* registry, SharedMemoryRegistry* shm, BackendInfo backend,
             Observer* observer, SessionManager* sessions = nullptr);
  ~OipService() override;

  using Ctx = grpc::CallbackServerContext;
  using Unary = grpc::ServerUnaryReactor;
  Unary* ServerLive(Ctx* c, const inference::ServerLiveRequest* req,
                    inference::ServerLiveResponse* resp) override;
  Unary* ServerReady(Ctx* c, const inference::ServerReadyRequest* req,
                     inference::ServerReadyResponse* resp) override;
  Unary* ModelReady(Ctx* c, const inference::ModelReadyRequest* req,
                    inference::ModelReadyResponse* resp) override;
  Unary* ServerMetadata(Ctx* c, const inference::ServerMetadataRequest* req,
                        inference::ServerMetadataResponse* resp) override;
  Unary* ModelMetadata(Ctx* c, const inference::ModelMetadataRequest* req,
                       inference::ModelMetadataResponse* resp) override;
  Unary* ModelInfer(Ctx* c, const grpc::ByteBuffer* req, grpc::ByteBuffer* resp) override;
  grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>*
  ModelStreamInfer(Ctx* c) override;
  Unary* ModelConfig(Ctx* c, const inference::ModelConfigRequest* req,
                     inference::ModelConfigResponse* resp) override;
  Unary* ModelStatistics(Ctx* c, const inference::ModelStatisticsRequest* req,
                         inference::ModelStatisticsResponse* resp) override;
  Unary* RepositoryIndex(Ctx* c, const inference::RepositoryIndexRequest* req,
                         inference::RepositoryIndexResponse* resp) override;
  Unary* RepositoryModelLoad(Ctx* c, const inference::RepositoryModelLoadRequest* req,
                             inference::RepositoryModelLoadResponse* resp) override;
  Unary* RepositoryModelUnload(Ctx* c, const inference::RepositoryModelUnloadRequest* req,
                               inference::RepositoryModelUnloadResponse* resp) override;
  Unary* SystemSharedMemoryStatus(Ctx* c,
                                  const inference::SystemSharedMemoryStatusRequest* req,
                                  inference::SystemSharedMemoryStatusResponse* resp) override;
  Unary* SystemSharedMemoryRegister(
      Ctx* c, const inference::SystemSharedMemoryRegisterRequest* req,
      inference::SystemSharedMemoryRegisterResponse* resp) override;
  Unary* SystemSharedMemoryUnregister(
      Ctx* c, const inference::SystemSharedMemoryUnregisterRequest* req,
      inference::SystemSharedMemoryUnregisterResponse* resp) override;
  Unary* CudaSharedMemoryStatus(Ctx* c, const inference::CudaSharedMemoryStatusRequest* req,
                                inference::CudaSharedMemoryStatusResponse* resp) override;
  Unary* CudaSharedMemoryRegister(Ctx* c,
                                  const inference::CudaSharedMemoryRegisterRequest* req,
                                  inference::CudaSharedMemoryRegisterResponse* resp) override;
  Unary* CudaSharedMemoryUnregister(
      Ctx* c, const inference::CudaSharedMemoryUnregisterRequest* req,
      inference::CudaSharedMemoryUnregisterResponse* resp) override;

  // One inference for either RPC: `done` runs exactly once, inline when the
  // request is refused before the scheduler, else from a lane thread. The
  // request and response must stay valid until then. The call's translated
  // request (for the log line) is in *call.
  using InferDone = absl::AnyInvocable<void(const absl::Status&)>;
  // `raw_in` / `raw_out` (may be null): raw contents outside the messages
  // (oip_wire.h), owned by `request_owner`.
  void StartInfer(grpc::CallbackServerContext* context,
                  const inference::ModelInferRequest* request,
                  inference::ModelInferResponse* response, const Principal& principal,
                  const RawBuffers* raw_in,
                  RawBuffers* raw_out, std::shared_ptr<const void> request_owner,
                  std::shared_ptr<OipInferCall>* call, InferDone done);

  // Log line and observer report of a finished call; the reactor is the
  // caller's to finish.
  struct CallInfo {
    const char* method = "";
    absl::Time start;
    int64_t bytes_received = 0;
    std::string request_id;
    Principal principal;
    absl::Status auth;  // UNAUTHENTICATED when the token did not check out
  };
  CallInfo Begin(const char* method, grpc::ServerContextBase* context,
                 int64_t bytes_received);
  void Report(grpc::ServerContextBase* context, const CallInfo& call,
              const absl::Status& status, int64_t bytes_sent,
              const google::protobuf::Message* described);

 private:
  class Stream;
  // Cumulative figures of one model (ModelStatistics).
  struct ModelStats {
    std::atomic<uint64_t> success_count{0}, success_ns{0};
    std::atomic<uint64_t> fail_count{0}, fail_ns{0};
    std::atomic<uint64_t> queue_ns{0}, compute_ns{0};
    std::atomic<uint64_t> inference_count{0};
    // Launches, in millionths: each request adds 1/(requests in its batch).
    std::atomic<uint64_t> execution_micro{0};
    std::atomic<uint64_t> last_inference_ms{0};
  };
  ModelStats* StatsOf(const OipModel* model);
  void Record(const OipModel* model, int64_t batch, const absl::Status& status,
              absl::Duration latency, const TaskTimings& timings);

  // Answers a call handled inline: `handle` fills the response.
  template <typename Request, typename Response, typename Handle>
  Unary* Inline(const char* method, Ctx* context, const Request* request,
                Response* response, Handle handle);

  bool Ready() const { return !options_.ready || options_.ready(); }

  const OipServiceOptions options_;
  RequestSubmitter* const submitter_;
  WeightRegistry* const registry_;
  SharedMemoryRegistry* const shm_;
  const BackendInfo backend_;
  Observer* const observer_;
  SessionManager* const sessions_;  // may be null
  OipSequences sequences_;
  std::array<ModelStats, 3> stats_;
  RequestIds request_ids_;
};

}  // namespace conv1d

#endif  // CONV1D_SERVER_FRONTEND_OIP_SERVICE_H_
