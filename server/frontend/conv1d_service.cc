#include "server/frontend/conv1d_service.h"

#include <chrono>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/types/optional.h"
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

}  // namespace

Conv1dService::Conv1dService(const ServiceOptions& options, Scheduler* scheduler,
                             WeightRegistry* registry, Backend* backend,
                             Observer* observer)
    : options_(options),
      scheduler_(scheduler),
      registry_(registry),
      backend_(backend),
      observer_(observer) {}

void Conv1dService::Finish(grpc::ServerUnaryReactor* reactor,
                           grpc::CallbackServerContext* context,
                           const char* method, absl::Time start,
                           int64_t bytes_received,
                           const google::protobuf::Message* response,
                           const absl::Status& status) {
  const int64_t bytes_sent =
      status.ok() && response != nullptr
          ? static_cast<int64_t>(response->ByteSizeLong())
          : 0;
  observer_->OnRequestDone(method, status.code(), absl::Now() - start,
                           bytes_received, bytes_sent);
  AddRetryHint(status, context);
  reactor->Finish(ToGrpcStatus(status));
}

template <typename Request, typename Response, typename Validate, typename Bind>
grpc::ServerUnaryReactor* Conv1dService::Compute(
    const char* method, grpc::CallbackServerContext* context,
    const Request* request, Response* response, Validate validate, Bind bind) {
  const absl::Time start = absl::Now();
  observer_->OnRequestStart(method);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const int64_t bytes_received = static_cast<int64_t>(request->ByteSizeLong());

  ValidatedCall call;
  absl::Status status = validate(*request, *registry_, options_.limits, &call);
  if (!status.ok()) {
    observer_->OnRejected(RejectReason::kInvalid);
    Finish(reactor, context, method, start, bytes_received, nullptr, status);
    return reactor;
  }
  status = CheckRequestSize(call, options_.limits);
  RejectReason reason = RejectReason::kTooLarge;
  if (status.ok()) {
    status = backend_->CanServe(call.key, call.segment);
    // A backend's own shape rules count as invalid input; anything else
    // (pool capacity) as too large for this server.
    if (absl::IsInvalidArgument(status)) reason = RejectReason::kInvalid;
  }
  if (!status.ok()) {
    observer_->OnRejected(reason);
    Finish(reactor, context, method, start, bytes_received, nullptr, status);
    return reactor;
  }

  // The only request-sized allocation: the response's output bytes.
  bind(&call, response);

  auto task = std::make_unique<Task>();
  task->id = next_task_id_.fetch_add(1, std::memory_order_relaxed);
  task->key = call.key;
  task->segment = std::move(call.segment);
  task->deadline = DeadlineOf(*context);
  task->cancelled = [context] { return context->IsCancelled(); };
  task->keepalive = std::move(call.weights);
  task->on_done = [this, reactor, context, method, start, bytes_received,
                   response](const absl::Status& done, const TaskTimings&) {
    Finish(reactor, context, method, start, bytes_received, response, done);
  };
  status = scheduler_->Submit(&task);
  if (!status.ok()) {
    // Still ours: on_done will not run. The scheduler has already reported
    // the rejection (queue full, draining) to the observer.
    Finish(reactor, context, method, start, bytes_received, nullptr, status);
  }
  return reactor;
}

grpc::ServerUnaryReactor* Conv1dService::Forward(
    grpc::CallbackServerContext* context, const v1::ForwardRequest* request,
    v1::ForwardResponse* response) {
  return Compute("Forward", context, request, response, ValidateForward,
                 BindForwardResponse);
}

grpc::ServerUnaryReactor* Conv1dService::Backward(
    grpc::CallbackServerContext* context, const v1::BackwardRequest* request,
    v1::BackwardResponse* response) {
  return Compute("Backward", context, request, response, ValidateBackward,
                 BindBackwardResponse);
}

grpc::ServerUnaryReactor* Conv1dService::Update(
    grpc::CallbackServerContext* context, const v1::UpdateRequest* request,
    v1::UpdateResponse* response) {
  return Compute("Update", context, request, response, ValidateUpdate,
                 BindUpdateResponse);
}

grpc::ServerUnaryReactor* Conv1dService::RegisterWeights(
    grpc::CallbackServerContext* context,
    const v1::RegisterWeightsRequest* request,
    v1::RegisterWeightsResponse* response) {
  static constexpr char kMethod[] = "RegisterWeights";
  const absl::Time start = absl::Now();
  observer_->OnRequestStart(kMethod);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const int64_t bytes_received = static_cast<int64_t>(request->ByteSizeLong());
  ValidatedWeights w;
  absl::Status status = ValidateRegisterWeights(*request, options_.limits, &w);
  if (!status.ok()) {
    observer_->OnRejected(RejectReason::kInvalid);
  } else {
    // The registry owns its copy: the request is gone once the call ends.
    absl::optional<std::string> bias;
    if (w.has_bias) bias = request->bias().data();
    absl::StatusOr<std::shared_ptr<const WeightSet>> set =
        registry_->Register(request->name(), w.dtype, w.dim, w.width,
                            request->weight().data(), std::move(bias),
                            request->replace());
    if (set.ok()) {
      FillInfo(**set, response->mutable_info());
    } else {
      status = set.status();
    }
  }
  Finish(reactor, context, kMethod, start, bytes_received, response, status);
  return reactor;
}

grpc::ServerUnaryReactor* Conv1dService::UnregisterWeights(
    grpc::CallbackServerContext* context,
    const v1::UnregisterWeightsRequest* request,
    v1::UnregisterWeightsResponse* response) {
  static constexpr char kMethod[] = "UnregisterWeights";
  const absl::Time start = absl::Now();
  observer_->OnRequestStart(kMethod);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::Status status = WeightRegistry::ValidateName(request->name());
  if (status.ok()) status = registry_->Unregister(request->name());
  Finish(reactor, context, kMethod, start,
         static_cast<int64_t>(request->ByteSizeLong()), response, status);
  return reactor;
}

grpc::ServerUnaryReactor* Conv1dService::ListWeights(
    grpc::CallbackServerContext* context, const v1::ListWeightsRequest* request,
    v1::ListWeightsResponse* response) {
  static constexpr char kMethod[] = "ListWeights";
  const absl::Time start = absl::Now();
  observer_->OnRequestStart(kMethod);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  for (const std::shared_ptr<const WeightSet>& set : registry_->List()) {
    FillInfo(*set, response->add_weights());
  }
  Finish(reactor, context, kMethod, start,
         static_cast<int64_t>(request->ByteSizeLong()), response,
         absl::OkStatus());
  return reactor;
}

grpc::ServerUnaryReactor* Conv1dService::ServerInfo(
    grpc::CallbackServerContext* context, const v1::ServerInfoRequest* request,
    v1::ServerInfoResponse* response) {
  static constexpr char kMethod[] = "ServerInfo";
  const absl::Time start = absl::Now();
  observer_->OnRequestStart(kMethod);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  response->set_version(options_.version);
  response->set_backend(backend_->name());
  for (const std::string& device : backend_->devices()) {
    response->add_devices(device);
  }
  response->set_max_width(options_.limits.max_width);
  response->set_max_request_bytes(options_.limits.max_request_bytes);
  Finish(reactor, context, kMethod, start,
         static_cast<int64_t>(request->ByteSizeLong()), response,
         absl::OkStatus());
  return reactor;
}

}  // namespace conv1d
