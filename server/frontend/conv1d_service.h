// Conv1dService: the gRPC callback-API implementation of conv1d.v1.Conv1d.
//
// Methods are registered raw (ByteBuffer in, ByteBuffer out) so that the
// service parses requests itself: a message that does not parse is answered
// INVALID_ARGUMENT by us, not an opaque code by the library, and the parsed
// request and its response are owned by the call, i.e. by the Task's
// keepalive (with the registered weight set the request named).
//
// Forward, Backward and Update parse and validate the request
// (validation.h), size the response, and submit a Task whose views point
// into that request and response; with a backend whose host buffers are
// page-locked (or ServiceOptions::host_tensors kAlways), tensors of at least
// host_tensor_min_bytes are received into and sent from those buffers
// instead (wire_tensors.h: one copy in, none out, moved by DMA without
// staging).
// The handler returns at once and the call
// is finished from the Task's on_done on a scheduler lane thread (which
// serializes the response), so no reactor ever blocks on compute.
//
// The registry RPCs (RegisterWeights, UnregisterWeights, ListWeights) and
// ServerInfo are answered inline: they touch only host memory.
//
// With ServiceOptions::auth, every call first authenticates its bearer token
// (auth.h): UNAUTHENTICATED without a valid one, before the request is even
// parsed; compute calls naming a weight set the principal may not use, and
// weight changes its role does not allow, are PERMISSION_DENIED. Weight
// changes (register, replace, unregister; allowed or not) carry the
// principal, the action and the set's name into their access log line.
// With a ByteAdmission (ServiceOptions::admission), every call reserves its
// received bytes before anything is parsed, and compute calls add their
// response's bytes before it is allocated; a refusal is RESOURCE_EXHAUSTED
// (OnRejected(kMemoryFull)). The reservation ends when the answer has been
// sent (it rides on the response's last slice). The received ByteBuffer is
// released as soon as it is parsed, so a call holds its bytes once, not twice.
//
// Every call gets a request id (request_log.h), returned as the trailer
// `x-request-id` and named in the call's debug line and access log line.
//
// Errors reach the client through status_mapping.h only. Observer hooks:
// OnRequestStart / OnRequestDone for every RPC, OnRejected(kInvalid) for a
// failed validation and OnRejected(kTooLarge) for a request over the size
// limit or beyond the backend's limits (BackendInfo, read at start-up; the
// scheduler reports its own rejections).
//
// Tensors may name a place in a registered system shared-memory region
// instead of carrying bytes (Tensor.shared_memory, output_shared_memory):
// they are read and written there (Placement kSharedHost for page-locked
// regions, shm_registry.h), when the region is the caller's own.
//
// Decode sessions belong to the principal that opened them: a call naming
// another principal's session is NOT_FOUND, as for an unknown id, except
// that an admin may close it (and is PERMISSION_DENIED for anything else);
// see ownership.h.
//
// Compute calls reach the scheduler through a RequestSubmitter
// (request_submit.h), the path the Open Inference Protocol frontend shares.
//
// Thread-safety: handlers run concurrently on gRPC's threads; the service
// holds no mutable state besides an atomic request-id counter. The
// submitter, registry, backend and observer are not owned and must outlive
// the grpc::Server the service is registered with.
#ifndef CONV1D_SERVER_FRONTEND_CONV1D_SERVICE_H_
#define CONV1D_SERVER_FRONTEND_CONV1D_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "conv1d/v1/conv1d.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "server/core/admission.h"
#include "server/core/backend.h"
#include "server/core/observer.h"
#include "server/core/shm_registry.h"
#include "server/core/weight_registry.h"
#include "server/core/session_manager.h"
#include "server/frontend/auth.h"
#include "server/frontend/request_log.h"
#include "server/frontend/request_submit.h"
#include "server/frontend/session_calls.h"
#include "server/frontend/validation.h"
#include "server/logging/access_log.h"

namespace conv1d {

struct ServiceOptions {
  ValidationLimits limits;
  // Reported by ServerInfo.
  std::string version;
  // One line per finished call; null: no access log.
  std::shared_ptr<AccessLog> access_log;
  // Bearer-token authentication; null: none (every call may do everything).
  std::shared_ptr<const Authenticator> auth;
  // Compute-request tensors of at least this many bytes are received into,
  // and outputs sent from, the backend's HostBufferProvider memory rather than
  // protobuf strings (wire_tensors.h) when host_tensors says so; -1: never.
  int64_t host_tensor_min_bytes = int64_t{4} << 10;
  HostTensors host_tensors = HostTensors::kAuto;
  // Admission by bytes in flight; null admits every call.
  std::shared_ptr<ByteAdmission> admission;
};

// The session methods of conv1d.v1.Conv1d as raw callback methods.
using RawSessionMethods = v1::Conv1d::WithRawCallbackMethod_Decode<
    v1::Conv1d::WithRawCallbackMethod_OpenSession<
        v1::Conv1d::WithRawCallbackMethod_CommitSession<
            v1::Conv1d::WithRawCallbackMethod_ForkSession<
                v1::Conv1d::WithRawCallbackMethod_ExportSession<
                    v1::Conv1d::WithRawCallbackMethod_CloseSession<v1::Conv1d::Service>>>>>>;

// Every method of conv1d.v1.Conv1d as a raw callback method.
using RawConv1dService = v1::Conv1d::WithRawCallbackMethod_Forward<
    v1::Conv1d::WithRawCallbackMethod_Backward<v1::Conv1d::WithRawCallbackMethod_Update<
        v1::Conv1d::WithRawCallbackMethod_RegisterWeights<
            v1::Conv1d::WithRawCallbackMethod_UnregisterWeights<
                v1::Conv1d::WithRawCallbackMethod_ListWeights<
                    v1::Conv1d::WithRawCallbackMethod_ServerInfo<RawSessionMethods>>>>>>>;

class Conv1dService final : public RawConv1dService {
 public:
  // REQUIRES: every pointer non-null and outliving the service, except
  // `shm` (null: no region can be named), which resolves the tensors that
  // name a registered shared-memory region (v1_shared_memory.h), and
  // `sessions`: null when the backend serves no decode sessions (the session
  // RPCs then answer UNIMPLEMENTED). Session steps go to `scheduler` with
  // task ids from `submitter`.
  Conv1dService(const ServiceOptions& options, RequestSubmitter* submitter,
                Scheduler* scheduler, WeightRegistry* registry, SharedMemoryRegistry* shm,
                BackendInfo backend, Observer* observer, SessionManager* sessions = nullptr);
  ~Conv1dService() override;

  // Drain: every open Decode stream gets its session's state and ends with
  // UNAVAILABLE; new streams are refused. Returns how many streams it asked.
  int DrainSessionStreams();

  grpc::ServerUnaryReactor* Forward(grpc::CallbackServerContext* context,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Backward(grpc::CallbackServerContext* context,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Update(grpc::CallbackServerContext* context,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* RegisterWeights(grpc::CallbackServerContext* context,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* UnregisterWeights(grpc::CallbackServerContext* context,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ListWeights(grpc::CallbackServerContext* context,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ServerInfo(grpc::CallbackServerContext* context,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;

  // Decode sessions (session_rpcs.cc, decode_stream.h).
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Decode(
      grpc::CallbackServerContext* context) override;
  grpc::ServerUnaryReactor* OpenSession(grpc::CallbackServerContext* context,
                                        const grpc::ByteBuffer* request,
                                        grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* CommitSession(grpc::CallbackServerContext* context,
                                          const grpc::ByteBuffer* request,
                                          grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ForkSession(grpc::CallbackServerContext* context,
                                        const grpc::ByteBuffer* request,
                                        grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ExportSession(grpc::CallbackServerContext* context,
                                          const grpc::ByteBuffer* request,
                                          grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* CloseSession(grpc::CallbackServerContext* context,
                                         const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response) override;

 private:
  // Parses, validates, binds and submits one compute call; `validate` and
  // `bind` are the op's functions from validation.h.
  template <typename Request, typename Response, typename Validate, typename Bind>
  grpc::ServerUnaryReactor* Compute(const char* method,
                                    grpc::CallbackServerContext* context,
                                    const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* response, Validate validate,
                                    Bind bind);

  // Parses and answers a call handled inline: `handle(request, &response,
  // &call_info)` fills the response message or returns an error.
  template <typename Request, typename Response, typename Handle>
  grpc::ServerUnaryReactor* Inline(const char* method,
                                   grpc::CallbackServerContext* context,
                                   const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* response, Handle handle);

  // What Finish needs to know about a call besides its outcome.
  struct CallInfo {
    const char* method = "";
    absl::Time start;
    int64_t bytes_received = 0;
    std::string request_id;
    // The parsed request, described in the debug line; null when it did not
    // parse. Must stay valid until Finish returns.
    const google::protobuf::Message* request = nullptr;
    // The authenticated caller; empty name when the service has no auth.
    Principal principal;
    // Weight changes: "register", "replace" or "unregister", and the set.
    const char* audit_action = "";
    std::string audit_weights;
    // The call's bytes in flight (null without admission), and whether they
    // were admitted (RESOURCE_EXHAUSTED when not).
    std::shared_ptr<ByteAdmission::Reservation> inflight;
    absl::Status admitted;
  };

  // Starts a call: its start time, observer report and request id; with
  // auth, the caller's principal or `*auth_status` UNAUTHENTICATED.
  CallInfo Begin(const char* method, grpc::CallbackServerContext* context,
                 const grpc::ByteBuffer* request, absl::Status* auth_status);

  // Serializes `message` (when `status` is OK) into `response`, reports and
  // logs the outcome, sends the request id and finishes the call, with a
  // retry hint for retryable errors when `retry_hint` (compute calls: a full
  // queue empties). Tensors listed in `detached` (may be null) are sent from
  // their buffers. After this returns, the context and the buffers may be
  // gone.
  void Finish(grpc::ServerUnaryReactor* reactor,
              grpc::CallbackServerContext* context, const CallInfo& call,
              const google::protobuf::Message* message,
              grpc::ByteBuffer* response, absl::Status status,
              bool retry_hint = true, const DetachedTensors* detached = nullptr);

  // An Update naming a session: a step of that session (session_rpcs.cc).
  // `keepalive` owns `request`, `message` and `detached` until the call ends.
  void SessionUpdate(grpc::ServerUnaryReactor* reactor,
                     grpc::CallbackServerContext* context, const CallInfo& info,
                     const v1::UpdateRequest& request, v1::UpdateResponse* message,
                     const DetachedTensors* detached, std::shared_ptr<const void> keepalive,
                     grpc::ByteBuffer* response);

  // A unary session call answered once `handle` has run: it gets the parsed
  // request and the response, and returns the outcome (session_rpcs.cc).
  template <typename Request, typename Response, typename Handle>
  grpc::ServerUnaryReactor* SessionCall(const char* method,
                                        grpc::CallbackServerContext* context,
                                        const grpc::ByteBuffer* request,
                                        grpc::ByteBuffer* response, Handle handle);

  const ServiceOptions options_;
  RequestSubmitter* const submitter_;
  WeightRegistry* const registry_;
  SharedMemoryRegistry* const shm_;
  const BackendInfo backend_;
  Observer* const observer_;
  // The host_tensor_min_bytes in effect: -1 when host_tensors rules it out.
  const int64_t host_min_bytes_;
  RequestIds request_ids_;
  // Null when the backend serves no sessions.
  std::unique_ptr<SessionCalls> sessions_;
};

}  // namespace conv1d

#endif  // CONV1D_SERVER_FRONTEND_CONV1D_SERVICE_H_
