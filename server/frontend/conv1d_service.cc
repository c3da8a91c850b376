#include "server/frontend/conv1d_service.h"

#include <chrono>
#include <memory>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/types/optional.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "grpcpp/support/proto_buffer_writer.h"
#include "server/core/segment_check.h"
#include "server/core/task.h"
#include "server/frontend/status_mapping.h"

namespace conv1d {
namespace {

absl::Time DeadlineOf(const grpc::CallbackServerContext& context) {
  const std::chrono::system_clock::time_point tp = context.deadline();
  if (tp == std::chrono::system_clock::time_point::max()) {
    return absl::InfiniteFuture();
  }
  return absl::FromChrono(tp);
}

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
};

}  // namespace

Conv1dService::Conv1dService(const ServiceOptions& options, Scheduler* scheduler,
                             WeightRegistry* registry, BackendInfo backend,
                             Observer* observer, SessionManager* sessions)
    : options_(options),
      scheduler_(scheduler),
      registry_(registry),
      backend_(std::move(backend)),
      observer_(observer),
      host_min_bytes_(options.host_tensors == HostTensors::kAlways ||
                              (options.host_tensors == HostTensors::kAuto &&
                               backend_.host_buffers->page_locked())
                          ? options.host_tensor_min_bytes
                          : -1) {
  if (sessions != nullptr) {
    sessions_ = std::make_unique<SessionCalls>(sessions, scheduler, registry, options.limits,
                                               backend_.limits, &next_task_id_);
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
  *auth_status = absl::OkStatus();
  if (options_.auth != nullptr) {
    absl::StatusOr<Principal> p = options_.auth->Authenticate(context->client_metadata());
    if (p.ok()) {
      call.principal = std::move(*p);
    } else {
      *auth_status = p.status();
    }
  } else {
    // Without authentication every caller may do everything.
    call.principal.role = AuthRole::kAdmin;
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
  auto fail = [&](RejectReason reason, const absl::Status& status) {
    observer_->OnRejected(reason);
    Finish(reactor, context, info, nullptr, response, status);
    return reactor;
  };

  auto call = std::make_shared<ComputeCall<Request, Response>>();
  const HostAllocator allocate = [buffers = backend_.host_buffers.get()](int64_t bytes) {
    return buffers->Allocate(bytes);
  };
  absl::Status status = ParseWithDetachedData(*request, &call->request, host_min_bytes_,
                                              allocate, &call->request_data);
  if (!status.ok()) return fail(RejectReason::kInvalid, status);
  info.request = &call->request;
  if constexpr (std::is_same_v<Request, v1::UpdateRequest>) {
    if (!call->request.session_id().empty()) {
      SessionUpdate(reactor, context, info, call->request, &call->response,
                    &call->request_data, call, response);
      return reactor;
    }
  }
  ValidatedCall valid;
  status = validate(call->request, *registry_, options_.limits, &valid,
                    &call->request_data);
  if (!status.ok()) return fail(RejectReason::kInvalid, status);
  if (valid.weights != nullptr) {
    status = MayUseWeights(info.principal, *valid.weights);
    if (!status.ok()) {
      Finish(reactor, context, info, nullptr, response, status, /*retry_hint=*/false);
      return reactor;
    }
  }
  status = CheckRequestSize(valid, options_.limits);
  if (!status.ok()) return fail(RejectReason::kTooLarge, status);

  // The only request-sized allocation: the response's output bytes, within
  // the limit just checked. Backends check the bound outputs too.
  OutputBuffers outputs;
  outputs.min_bytes = host_min_bytes_;
  outputs.allocate = allocate;
  outputs.detached = &call->response_data;
  bind(&valid, &call->response, &outputs);
  status = CheckServable(backend_.limits, valid.key, valid.segment);
  if (!status.ok()) {
    // A malformed segment counts as invalid input; anything else (beyond
    // the backend's capacity) as too large for this server.
    return fail(absl::IsInvalidArgument(status) ? RejectReason::kInvalid
                                                : RejectReason::kTooLarge,
                status);
  }

  auto task = std::make_unique<Task>();
  task->id = next_task_id_.fetch_add(1, std::memory_order_relaxed);
  task->key = valid.key;
  task->segment = std::move(valid.segment);
  task->deadline = DeadlineOf(*context);
  task->cancelled = [context] { return context->IsCancelled(); };
  call->weights = std::move(valid.weights);
  // The task (and so `call`) lives until on_done has returned.
  const Response* message = &call->response;
  const DetachedTensors* response_data = &call->response_data;
  task->keepalive = std::move(call);
  task->on_done = [this, reactor, context, info, message, response, response_data](
                      const absl::Status& done, const TaskTimings&) {
    Finish(reactor, context, info, message, response, done, /*retry_hint=*/true,
           response_data);
  };
  status = scheduler_->Submit(&task);
  if (!status.ok()) {
    // Still ours (and so is `call`): on_done will not run. The scheduler has
    // already reported the rejection (queue full, draining) to the observer.
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
  if (status.ok()) status = ParseMessage(*request, &req);
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
