#include "server/frontend/conv1d_service.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/optional.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "grpcpp/support/proto_buffer_writer.h"
#include "server/core/segment_check.h"
#include "server/core/task.h"
#include "server/frontend/ownership.h"
#include "server/frontend/status_mapping.h"
#include "server/frontend/v1_shared_memory.h"

namespace conv1d {
namespace {

void FillInfo(const WeightSet& set, v1::WeightsInfo* info) {
  info->set_name(set.name);
  info->set_dtype(ToWireDType(set.dtype));
  info->set_dim(set.dim);
  info->set_width(set.width);
  info->set_has_bias(set.has_bias);
  info->set_bytes(set.bytes());
}

// A weight set's name as the audit line shows it: only valid names are
// client text that can go into a log line as is.
std::string AuditName(const std::string& name) {
  return WeightRegistry::ValidateName(name).ok() ? name : "(invalid name)";
}

// One compute call: the parsed request and the response the backend writes
// into, with the tensor bytes kept outside them, owned together by the
// Task's keepalive.
template <typename Request, typename Response>
struct ComputeCall {
  Request request;
  Response response;
  DetachedTensors request_data;
  DetachedTensors response_data;
  std::shared_ptr<const WeightSet> weights;
  std::vector<SharedOutput> shared_outputs;
  // Regions in use (shm_registry.h): released before the client is answered.
  std::vector<std::shared_ptr<void>> leases;
};

// Makes the last slice of `buffer` hold `hold` until gRPC lets go of it,
// i.e. until the answer has been sent. An empty buffer holds nothing.
void HoldUntilSent(grpc::ByteBuffer* buffer, std::shared_ptr<void> hold) {
  std::vector<grpc::Slice> slices;
  if (buffer->Length() == 0 || !buffer->Dump(&slices).ok() || slices.empty()) return;
  struct Keep {
    grpc::Slice slice;
    std::shared_ptr<void> hold;
  };
  auto* keep = new Keep{slices.back(), std::move(hold)};
  slices.back() = grpc::Slice(const_cast<uint8_t*>(keep->slice.begin()),
                              keep->slice.size(),
                              [](void* k) { delete static_cast<Keep*>(k); }, keep);
  *buffer = grpc::ByteBuffer(slices.data(), slices.size());
}

// The received message is parsed: give its bytes back now rather than when
// the call ends. The buffer belongs to the call and is read by no one after
// the handler.
void ReleaseRequestBytes(const grpc::ByteBuffer* request) {
  const_cast<grpc::ByteBuffer*>(request)->Clear();
}

}  // namespace

Conv1dService::Conv1dService(const ServiceOptions& options, RequestSubmitter* submitter,
                             Scheduler* scheduler, WeightRegistry* registry,
                             SharedMemoryRegistry* shm, BackendInfo backend,
                             Observer* observer, SessionManager* sessions)
    : options_(options),
      submitter_(submitter),
      registry_(registry),
      shm_(shm),
      backend_(std::move(backend)),
      observer_(observer),
      host_min_bytes_(options.host_tensors == HostTensors::kAlways ||
                              (options.host_tensors == HostTensors::kAuto &&
                               backend_.host_buffers->page_locked())
                          ? options.host_tensor_min_bytes
                          : -1) {
  if (sessions != nullptr) {
    sessions_ = std::make_unique<SessionCalls>(sessions, scheduler, registry, options.limits,
                                               backend_.limits, submitter->task_ids());
  }
}

Conv1dService::~Conv1dService() = default;

Conv1dService::CallInfo Conv1dService::Begin(const char* method,
                                              grpc::CallbackServerContext* context,
                                              const grpc::ByteBuffer* request,
                                              absl::Status* auth_status) {
  CallInfo call;
  call.method = method;
  call.start = absl::Now();
  call.bytes_received = static_cast<int64_t>(request->Length());
  call.request_id = request_ids_.Next(*context);
  observer_->OnRequestStart(method);
  absl::StatusOr<Principal> p = PrincipalOf(options_.auth.get(), context->client_metadata());
  *auth_status = p.status();
  if (p.ok()) call.principal = *std::move(p);
  if (options_.admission != nullptr) {
    call.inflight = options_.admission->TryReserve(call.bytes_received);
    if (call.inflight == nullptr) {
      call.admitted = options_.admission->RefusedError("request", call.bytes_received);
    }
  }
  return call;
}

void Conv1dService::Finish(grpc::ServerUnaryReactor* reactor,
                           grpc::CallbackServerContext* context, const CallInfo& call,
                           const google::protobuf::Message* message,
                           grpc::ByteBuffer* response, absl::Status status,
                           bool retry_hint, const DetachedTensors* detached) {
  int64_t bytes_sent = 0;
  if (status.ok() && message != nullptr) {
    if (detached != nullptr && !detached->empty()) {
      status = SerializeWithDetachedData(*message, *detached, response);
      if (status.ok()) bytes_sent = static_cast<int64_t>(response->Length());
    } else {
      bool own_buffer = false;
      grpc::Status s =
          grpc::GenericSerialize<grpc::ProtoBufferWriter, google::protobuf::Message>(
              *message, response, &own_buffer);
      if (s.ok()) {
        bytes_sent = static_cast<int64_t>(response->Length());
      } else {
        status = absl::InternalError(absl::StrCat("response: ", s.error_message()));
      }
    }
    if (status.ok() && call.inflight != nullptr) HoldUntilSent(response, call.inflight);
  }
  const absl::Duration latency = absl::Now() - call.start;
  observer_->OnRequestDone(call.method, status.code(), latency, call.bytes_received,
                           bytes_sent);
  FinishedCall finished;
  finished.method = call.method;
  finished.request_id = call.request_id;
  finished.status = status;
  finished.latency = latency;
  finished.request_bytes = call.bytes_received;
  finished.response_bytes = bytes_sent;
  finished.request = call.request;
  finished.principal = call.principal.name;
  finished.audit_action = call.audit_action;
  finished.audit_weights = call.audit_weights;
  LogFinishedCall(finished, context, options_.access_log.get());
  context->AddTrailingMetadata(kRequestIdKey, call.request_id);
  if (retry_hint) AddRetryHint(status, context);
  reactor->Finish(ToGrpcStatus(status));
}

template <typename Request, typename Response, typename Validate, typename Bind>
grpc::ServerUnaryReactor* Conv1dService::Compute(
    const char* method, grpc::CallbackServerContext* context,
    const grpc::ByteBuffer* request, grpc::ByteBuffer* response,
    Validate validate, Bind bind) {
  absl::Status auth_status;
  CallInfo info = Begin(method, context, request, &auth_status);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (!auth_status.ok()) {
    Finish(reactor, context, info, nullptr, response, auth_status, /*retry_hint=*/false);
    return reactor;
  }
  auto call = std::make_shared<ComputeCall<Request, Response>>();
  auto fail = [&](RejectReason reason, const absl::Status& status) {
    observer_->OnRejected(reason);
    call->leases.clear();
    Finish(reactor, context, info, nullptr, response, status);
    return reactor;
  };

  if (!info.admitted.ok()) {
    ReleaseRequestBytes(request);
    return fail(RejectReason::kMemoryFull, info.admitted);
  }

  const HostAllocator allocate = [buffers = backend_.host_buffers.get()](int64_t bytes) {
    return buffers->Allocate(bytes);
  };
  absl::Status status = ParseWithDetachedData(*request, &call->request, host_min_bytes_,
                                              allocate, &call->request_data);
  ReleaseRequestBytes(request);
  if (!status.ok()) return fail(RejectReason::kInvalid, status);
  info.request = &call->request;
  if constexpr (std::is_same_v<Request, v1::UpdateRequest>) {
    if (!call->request.session_id().empty()) {
      SessionUpdate(reactor, context, info, call->request, &call->response,
                    &call->request_data, call, response);
      return reactor;
    }
  }
  const RegionUser region_user = RegionUserOf(info.principal);
  status = AttachSharedInputs(call->request, shm_, region_user, &call->request_data,
                              &call->leases);
  if (!status.ok()) return fail(RejectReason::kInvalid, status);
  ValidatedCall valid;
  status = validate(call->request, *registry_, options_.limits, &valid,
                    &call->request_data);
  if (!status.ok()) return fail(RejectReason::kInvalid, status);
  status = ResolveSharedOutputs(call->request, shm_, region_user, &valid,
                                &call->shared_outputs, &call->leases);
  if (!status.ok()) return fail(RejectReason::kInvalid, status);
  if (valid.weights != nullptr) {
    status = MayUseWeights(info.principal, *valid.weights);
    if (!status.ok()) {
      call->leases.clear();
      Finish(reactor, context, info, nullptr, response, status, /*retry_hint=*/false);
      return reactor;
    }
  }
  status = submitter_->Admit(valid);
  if (!status.ok()) {
    call->leases.clear();
    Finish(reactor, context, info, nullptr, response, status);
    return reactor;
  }
  // The response's bytes join the call's bytes in flight before they exist
  // (inputs are in the request, counted already; registered weights make
  // this an overestimate).
  if (info.inflight != nullptr) {
    const int64_t response_bytes = std::max<int64_t>(valid.total_bytes - info.bytes_received, 0);
    if (!info.inflight->Grow(response_bytes)) {
      return fail(RejectReason::kMemoryFull,
                  options_.admission->RefusedError("response", response_bytes));
    }
  }

  // The only request-sized allocation: the response's output bytes, within
  // the limit just checked. Backends check the bound outputs too.
  OutputBuffers outputs;
  outputs.min_bytes = host_min_bytes_;
  outputs.allocate = allocate;
  outputs.detached = &call->response_data;
  HideSharedOutputs(&call->shared_outputs);
  bind(&valid, &call->response, &outputs);
  PlaceSharedOutputs(&call->shared_outputs, &call->response);
  call->weights = valid.weights;
  // The task (and so `call`) lives until on_done has returned; `call` is
  // held here too, so that a refused request can still be logged.
  const Response* message = &call->response;
  const DetachedTensors* response_data = &call->response_data;
  std::vector<std::shared_ptr<void>>* leases = &call->leases;
  status = submitter_->Submit(
      &valid, call, DeadlineOf(*context), [context] { return context->IsCancelled(); },
      [this, reactor, context, info, message, response, response_data, leases](
          const absl::Status& done, const TaskTimings&) {
        leases->clear();
        Finish(reactor, context, info, message, response, done, /*retry_hint=*/true,
               response_data);
      });
  if (!status.ok()) {
    call->leases.clear();
    Finish(reactor, context, info, nullptr, response, status);
  }
  return reactor;
}

template <typename Request, typename Response, typename Handle>
grpc::ServerUnaryReactor* Conv1dService::Inline(const char* method,
                                                grpc::CallbackServerContext* context,
                                                const grpc::ByteBuffer* request,
                                                grpc::ByteBuffer* response,
                                                Handle handle) {
  absl::Status status;
  CallInfo info = Begin(method, context, request, &status);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  Request req;
  Response resp;
  if (status.ok() && !info.admitted.ok()) {
    ReleaseRequestBytes(request);
    observer_->OnRejected(RejectReason::kMemoryFull);
    Finish(reactor, context, info, nullptr, response, info.admitted);
    return reactor;
  }
  if (status.ok()) status = ParseMessage(*request, &req);
  ReleaseRequestBytes(request);
  if (status.ok()) {
    info.request = &req;
    status = handle(req, &resp, &info);
  }
  if (absl::IsInvalidArgument(status)) observer_->OnRejected(RejectReason::kInvalid);
  // A full weight registry does not empty by waiting: no retry hint.
  Finish(reactor, context, info, &resp, response, status, /*retry_hint=*/false);
  return reactor;
}

grpc::ServerUnaryReactor* Conv1dService::Forward(grpc::CallbackServerContext* context,
                                                 const grpc::ByteBuffer* request,
                                                 grpc::ByteBuffer* response) {
  return Compute<v1::ForwardRequest, v1::ForwardResponse>(
      "Forward", context, request, response, ValidateForward, BindForwardResponse);
}

grpc::ServerUnaryReactor* Conv1dService::Backward(grpc::CallbackServerContext* context,
                                                  const grpc::ByteBuffer* request,
                                                  grpc::ByteBuffer* response) {
  return Compute<v1::BackwardRequest, v1::BackwardResponse>(
      "Backward", context, request, response, ValidateBackward, BindBackwardResponse);
}

grpc::ServerUnaryReactor* Conv1dService::Update(grpc::CallbackServerContext* context,
                                                const grpc::ByteBuffer* request,
                                                grpc::ByteBuffer* response) {
  return Compute<v1::UpdateRequest, v1::UpdateResponse>(
      "Update", context, request, response, ValidateUpdate, BindUpdateResponse);
}

grpc::ServerUnaryReactor* Conv1dService::RegisterWeights(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Inline<v1::RegisterWeightsRequest, v1::RegisterWeightsResponse>(
      "RegisterWeights", context, request, response,
      [this](const v1::RegisterWeightsRequest& req, v1::RegisterWeightsResponse* resp,
             CallInfo* call) {
        call->audit_action = req.replace() ? "replace" : "register";
        call->audit_weights = AuditName(req.name());
        ValidatedWeights w;
        absl::Status status = ValidateRegisterWeights(req, options_.limits, &w);
        if (!status.ok()) return status;
        // The registry keeps its own copy: the request ends with the call.
        absl::optional<std::string> bias;
        if (w.has_bias) bias = req.bias().data();
        const Principal& principal = call->principal;
        absl::StatusOr<std::shared_ptr<const WeightSet>> set = registry_->Register(
            req.name(), w.dtype, w.dim, w.width, req.weight().data(), std::move(bias),
            req.replace(), OwnerFor(principal),
            [&principal](const WeightSet& existing) {
              return MayChangeWeights(principal, existing);
            });
        if (!set.ok()) return set.status();
        FillInfo(**set, resp->mutable_info());
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* Conv1dService::UnregisterWeights(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Inline<v1::UnregisterWeightsRequest, v1::UnregisterWeightsResponse>(
      "UnregisterWeights", context, request, response,
      [this](const v1::UnregisterWeightsRequest& req, v1::UnregisterWeightsResponse*,
             CallInfo* call) {
        call->audit_action = "unregister";
        call->audit_weights = AuditName(req.name());
        absl::Status status = WeightRegistry::ValidateName(req.name());
        if (!status.ok()) return status;
        const Principal& principal = call->principal;
        return registry_->Unregister(req.name(), [&principal](const WeightSet& existing) {
          return MayChangeWeights(principal, existing);
        });
      });
}

grpc::ServerUnaryReactor* Conv1dService::ListWeights(grpc::CallbackServerContext* context,
                                                     const grpc::ByteBuffer* request,
                                                     grpc::ByteBuffer* response) {
  return Inline<v1::ListWeightsRequest, v1::ListWeightsResponse>(
      "ListWeights", context, request, response,
      [this](const v1::ListWeightsRequest&, v1::ListWeightsResponse* resp, CallInfo* call) {
        // Only the sets the caller may use.
        for (const std::shared_ptr<const WeightSet>& set : registry_->List()) {
          if (MayUseWeights(call->principal, *set).ok()) FillInfo(*set, resp->add_weights());
        }
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* Conv1dService::ServerInfo(grpc::CallbackServerContext* context,
                                                    const grpc::ByteBuffer* request,
                                                    grpc::ByteBuffer* response) {
  return Inline<v1::ServerInfoRequest, v1::ServerInfoResponse>(
      "ServerInfo", context, request, response,
      [this](const v1::ServerInfoRequest&, v1::ServerInfoResponse* resp, CallInfo*) {
        resp->set_version(options_.version);
        resp->set_backend(backend_.name);
        for (const std::string& device : backend_.devices) resp->add_devices(device);
        resp->set_max_width(options_.limits.max_width);
        resp->set_max_request_bytes(options_.limits.max_request_bytes);
        return absl::OkStatus();
      });
}

}  // namespace conv1d
