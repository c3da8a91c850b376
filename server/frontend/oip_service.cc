#include "server/frontend/oip_service.h"

#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/frontend/oip_device_regions.h"
#include "server/frontend/oip_params.h"
#include "server/frontend/oip_wire.h"
#include "server/frontend/ownership.h"
#include "server/frontend/status_mapping.h"

namespace conv1d {
namespace {

uint64_t Nanos(absl::Duration d) {
  const int64_t ns = absl::ToInt64Nanoseconds(d);
  return ns > 0 ? static_cast<uint64_t>(ns) : 0;
}

absl::Status ModelNotFound(absl::string_view name) {
  return absl::NotFoundError(absl::StrCat("model '", name,
                                          "' is not served (models: conv1d_forward, "
                                          "conv1d_backward, conv1d_update)"));
}

// The model of a metadata-style request, version checked.
absl::StatusOr<const OipModel*> LookupModel(absl::string_view name,
                                            absl::string_view version) {
  const OipModel* model = FindOipModel(name);
  if (model == nullptr) return ModelNotFound(name);
  if (!version.empty() && version != kOipModelVersion) {
    return absl::NotFoundError(absl::StrCat("model '", name, "' has no version '", version,
                                            "' (versions: ", kOipModelVersion, ")"));
  }
  return model;
}

}  // namespace

OipService::OipService(OipServiceOptions options, RequestSubmitter* submitter,
                       WeightRegistry* registry, SharedMemoryRegistry* shm,
                       BackendInfo backend, Observer* observer, SessionManager* sessions)
    : options_(std::move(options)),
      submitter_(submitter),
      registry_(registry),
      shm_(shm),
      backend_(std::move(backend)),
      observer_(observer),
      sessions_(sessions),
      sequences_(sessions, submitter, registry, shm) {}

OipService::~OipService() = default;

OipService::CallInfo OipService::Begin(const char* method, grpc::ServerContextBase* context,
                                       int64_t bytes_received) {
  CallInfo call;
  call.method = method;
  call.start = absl::Now();
  call.bytes_received = bytes_received;
  call.request_id = request_ids_.Next(*context);
  observer_->OnRequestStart(method);
  absl::StatusOr<Principal> p = PrincipalOf(options_.auth.get(), context->client_metadata());
  call.auth = p.status();
  if (p.ok()) call.principal = *std::move(p);
  return call;
}

void OipService::Report(grpc::ServerContextBase* context, const CallInfo& call,
                        const absl::Status& status, int64_t bytes_sent,
                        const google::protobuf::Message* described) {
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
  finished.request = described;
  LogFinishedCall(finished, context, options_.access_log.get());
}

OipService::ModelStats* OipService::StatsOf(const OipModel* model) {
  absl::Span<const OipModel> models = OipModels();
  for (size_t i = 0; i < models.size() && i < stats_.size(); ++i) {
    if (&models[i] == model) return &stats_[i];
  }
  return nullptr;
}

void OipService::Record(const OipModel* model, int64_t batch, const absl::Status& status,
                        absl::Duration latency, const TaskTimings& timings) {
  ModelStats* s = StatsOf(model);
  if (s == nullptr) return;
  if (!status.ok()) {
    s->fail_count.fetch_add(1, std::memory_order_relaxed);
    s->fail_ns.fetch_add(Nanos(latency), std::memory_order_relaxed);
    return;
  }
  s->success_count.fetch_add(1, std::memory_order_relaxed);
  s->success_ns.fetch_add(Nanos(latency), std::memory_order_relaxed);
  s->queue_ns.fetch_add(Nanos(timings.batch_start - timings.enqueued),
                        std::memory_order_relaxed);
  s->compute_ns.fetch_add(Nanos(timings.batch_end - timings.batch_start),
                          std::memory_order_relaxed);
  s->inference_count.fetch_add(static_cast<uint64_t>(batch), std::memory_order_relaxed);
  const int32_t fused = timings.batch_requests > 0 ? timings.batch_requests : 1;
  s->execution_micro.fetch_add(1000000 / static_cast<uint64_t>(fused),
                               std::memory_order_relaxed);
  s->last_inference_ms.store(static_cast<uint64_t>(absl::ToUnixMillis(absl::Now())),
                             std::memory_order_relaxed);
}

void OipService::StartInfer(grpc::CallbackServerContext* context,
                            const inference::ModelInferRequest* request,
                            inference::ModelInferResponse* response,
                            const Principal& principal, const RawBuffers* raw_in,
                            RawBuffers* raw_out,
                            std::shared_ptr<const void> request_owner,
                            std::shared_ptr<OipInferCall>* call_out, InferDone done) {
  const absl::Time start = absl::Now();
  if (HasSequenceParameters(*request)) {
    OipSequences::Request in;
    in.request = request;
    in.response = response;
    in.raw_in = raw_in;
    in.request_owner = std::move(request_owner);
    in.principal = principal;
    in.deadline = DeadlineOf(*context);
    in.cancelled = [context] { return context->IsCancelled(); };
    sequences_.Infer(std::move(in), call_out,
                     [this, start, done = std::move(done)](
                         const absl::Status& s, int64_t batch,
                         const TaskTimings& t) mutable {
                       if (batch == 0 && (absl::IsInvalidArgument(s) || absl::IsNotFound(s))) {
                         observer_->OnRejected(RejectReason::kInvalid);
                       }
                       Record(FindOipModel("conv1d_update"), batch, s, absl::Now() - start, t);
                       done(s);
                     });
    return;
  }
  auto call = std::make_shared<OipInferCall>();
  *call_out = call;
  absl::Status status =
      PrepareOipInfer(*request, raw_in, *registry_, shm_, RegionUserOf(principal),
                      submitter_->limits(), options_.require_all_inputs, call.get());
  if (!status.ok()) {
    observer_->OnRejected(RejectReason::kInvalid);
  } else if (call->valid.weights != nullptr &&
             !(status = MayUseWeights(principal, *call->valid.weights)).ok()) {
    // PERMISSION_DENIED naming the set.
  } else {
    status = submitter_->Admit(call->valid);
  }
  if (!status.ok()) {
    call->leases.clear();
    Record(call->model, 0, status, absl::Now() - start, TaskTimings());
    done(status);
    return;
  }
  OipOutputBuffers buffers;
  buffers.min_bytes = raw_out != nullptr ? options_.host_tensor_min_bytes : -1;
  buffers.allocate = [provider = backend_.host_buffers.get()](int64_t bytes) {
    return provider->Allocate(bytes);
  };
  buffers.raw = raw_out;
  BindOipOutputs(*request, call.get(), response, &buffers);
  const int64_t batch = call->valid.segment.batch;
  // `done` is called from on_done, or here when the scheduler refuses the
  // task (on_done is then dropped without running).
  auto finish = std::make_shared<InferDone>(std::move(done));
  struct Keep {
    std::shared_ptr<OipInferCall> call;
    std::shared_ptr<const void> request_owner;
  };
  auto keep = std::make_shared<Keep>(Keep{call, std::move(request_owner)});
  const OipModel* model = call->model;
  // Regions are released before the client hears back (shm_registry.h);
  // `raw` stays valid: the task keeps the call alive until on_done returns.
  OipInferCall* raw = call.get();
  status = submitter_->Submit(
      &call->valid, keep, DeadlineOf(*context), [context] { return context->IsCancelled(); },
      [this, finish, model, batch, start, raw](const absl::Status& s,
                                               const TaskTimings& t) {
        raw->leases.clear();
        Record(model, batch, s, absl::Now() - start, t);
        (*finish)(s);
      });
  if (!status.ok()) {
    call->leases.clear();
    Record(model, batch, status, absl::Now() - start, TaskTimings());
    (*finish)(status);
  }
}

namespace {

// One ModelInfer call's messages and the raw contents kept outside them.
struct OipUnaryCall {
  inference::ModelInferRequest request;
  inference::ModelInferResponse response;
  RawBuffers raw_in, raw_out;
  std::shared_ptr<OipInferCall> call;
};

}  // namespace

grpc::ServerUnaryReactor* OipService::ModelInfer(Ctx* context, const grpc::ByteBuffer* request,
                                                 grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  CallInfo info = Begin("ModelInfer", context, static_cast<int64_t>(request->Length()));
  auto unary = std::make_shared<OipUnaryCall>();
  const HostAllocator allocate = [provider = backend_.host_buffers.get()](int64_t bytes) {
    return provider->Allocate(bytes);
  };
  auto finish = [this, reactor, context, info, response,
                 unary](const absl::Status& done) {
    absl::Status status = done;
    if (status.ok()) {
      status = SerializeInferResponse(&unary->response, unary->raw_out, response);
    }
    const int64_t sent = status.ok() ? static_cast<int64_t>(response->Length()) : 0;
    Report(context, info, status, sent, TranslatedRequest(unary->call.get()));
    context->AddTrailingMetadata(kRequestIdKey, info.request_id);
    AddRetryHint(status, context);
    reactor->Finish(ToGrpcStatus(status));
  };
  if (!info.auth.ok()) {
    finish(info.auth);
    return reactor;
  }
  absl::Status status = ParseInferRequest(*request, options_.host_tensor_min_bytes, allocate,
                                          &unary->request, &unary->raw_in);
  if (!status.ok()) {
    observer_->OnRejected(RejectReason::kInvalid);
    finish(status);
    return reactor;
  }
  StartInfer(context, &unary->request, &unary->response, info.principal, &unary->raw_in,
             &unary->raw_out,
             unary, &unary->call, std::move(finish));
  return reactor;
}

template <typename Request, typename Response, typename Handle>
grpc::ServerUnaryReactor* OipService::Inline(const char* method, Ctx* context,
                                             const Request* request, Response* response,
                                             Handle handle) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  CallInfo info = Begin(method, context, static_cast<int64_t>(request->ByteSizeLong()));
  absl::Status status = info.auth;
  if (status.ok()) {
    // Handlers that act for the caller take its principal as well.
    if constexpr (std::is_invocable_v<Handle, const Request&, Response*, const Principal&>) {
      status = handle(*request, response, info.principal);
    } else {
      status = handle(*request, response);
    }
  }
  if (absl::IsInvalidArgument(status)) observer_->OnRejected(RejectReason::kInvalid);
  Report(context, info, status,
         status.ok() ? static_cast<int64_t>(response->ByteSizeLong()) : 0, nullptr);
  context->AddTrailingMetadata(kRequestIdKey, info.request_id);
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

grpc::ServerUnaryReactor* OipService::ServerLive(Ctx* c,
                                                 const inference::ServerLiveRequest* req,
                                                 inference::ServerLiveResponse* resp) {
  return Inline("ServerLive", c, req, resp, [](const auto&, auto* r) {
    r->set_live(true);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* OipService::ServerReady(Ctx* c,
                                                  const inference::ServerReadyRequest* req,
                                                  inference::ServerReadyResponse* resp) {
  return Inline("ServerReady", c, req, resp, [this](const auto&, auto* r) {
    r->set_ready(Ready());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* OipService::ModelReady(Ctx* c,
                                                 const inference::ModelReadyRequest* req,
                                                 inference::ModelReadyResponse* resp) {
  return Inline("ModelReady", c, req, resp,
                [this](const inference::ModelReadyRequest& q, auto* r) {
                  absl::StatusOr<const OipModel*> model = LookupModel(q.name(), q.version());
                  if (!model.ok()) return model.status();
                  r->set_ready(Ready());
                  return absl::OkStatus();
                });
}

grpc::ServerUnaryReactor* OipService::ServerMetadata(
    Ctx* c, const inference::ServerMetadataRequest* req,
    inference::ServerMetadataResponse* resp) {
  return Inline("ServerMetadata", c, req, resp, [this](const auto&, auto* r) {
    r->set_name("conv1d-serve");
    r->set_version(options_.version);
    for (const char* ext : {"model_configuration", "system_shared_memory", "statistics",
                            "parameters", "model_repository"}) {
      r->add_extensions(ext);
    }
    if (shm_->serves_device_regions()) r->add_extensions("cuda_shared_memory");
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* OipService::ModelMetadata(
    Ctx* c, const inference::ModelMetadataRequest* req,
    inference::ModelMetadataResponse* resp) {
  return Inline("ModelMetadata", c, req, resp,
                [](const inference::ModelMetadataRequest& q, auto* r) {
                  absl::StatusOr<const OipModel*> model = LookupModel(q.name(), q.version());
                  if (!model.ok()) return model.status();
                  FillModelMetadata(**model, r);
                  return absl::OkStatus();
                });
}

grpc::ServerUnaryReactor* OipService::ModelConfig(Ctx* c,
                                                  const inference::ModelConfigRequest* req,
                                                  inference::ModelConfigResponse* resp) {
  return Inline("ModelConfig", c, req, resp,
                [this](const inference::ModelConfigRequest& q, auto* r) {
                  absl::StatusOr<const OipModel*> model = LookupModel(q.name(), q.version());
                  if (!model.ok()) return model.status();
                  OipSequenceConfig sequences;
                  if (sessions_ != nullptr) {
                    sequences.served = true;
                    sequences.idle_timeout_s = sessions_->options().idle_timeout_s;
                    sequences.max_sequences = sessions_->slots()->num_slots();
                  }
                  FillModelConfig(**model, backend_.name == "gpu",
                                  options_.max_queue_delay_us,
                                  options_.require_all_inputs, sequences,
                                  r->mutable_config());
                  return absl::OkStatus();
                });
}

grpc::ServerUnaryReactor* OipService::ModelStatistics(
    Ctx* c, const inference::ModelStatisticsRequest* req,
    inference::ModelStatisticsResponse* resp) {
  return Inline(
      "ModelStatistics", c, req, resp,
      [this](const inference::ModelStatisticsRequest& q, auto* r) {
        if (!q.name().empty()) {
          absl::StatusOr<const OipModel*> model = LookupModel(q.name(), q.version());
          if (!model.ok()) return model.status();
        }
        for (const OipModel& m : OipModels()) {
          if (!q.name().empty() && q.name() != m.name) continue;
          const ModelStats& s = *StatsOf(&m);
          inference::ModelStatistics* out = r->add_model_stats();
          out->set_name(m.name);
          out->set_version(kOipModelVersion);
          out->set_last_inference(s.last_inference_ms.load());
          out->set_inference_count(s.inference_count.load());
          out->set_execution_count((s.execution_micro.load() + 500000) / 1000000);
          inference::InferStatistics* st = out->mutable_inference_stats();
          const uint64_t ok = s.success_count.load();
          st->mutable_success()->set_count(ok);
          st->mutable_success()->set_ns(s.success_ns.load());
          st->mutable_fail()->set_count(s.fail_count.load());
          st->mutable_fail()->set_ns(s.fail_ns.load());
          st->mutable_queue()->set_count(ok);
          st->mutable_queue()->set_ns(s.queue_ns.load());
          // The backend's batch time covers copies and kernel alike: it is
          // all reported as compute_infer, with input and output at zero
          // (the counts agree, as clients such as perf_analyzer expect).
          st->mutable_compute_input()->set_count(ok);
          st->mutable_compute_infer()->set_count(ok);
          st->mutable_compute_infer()->set_ns(s.compute_ns.load());
          st->mutable_compute_output()->set_count(ok);
        }
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* OipService::RepositoryIndex(
    Ctx* c, const inference::RepositoryIndexRequest* req,
    inference::RepositoryIndexResponse* resp) {
  return Inline("RepositoryIndex", c, req, resp, [this](const auto&, auto* r) {
    for (const OipModel& m : OipModels()) {
      auto* entry = r->add_models();
      entry->set_name(m.name);
      entry->set_version(kOipModelVersion);
      entry->set_state(Ready() ? "READY" : "UNAVAILABLE");
    }
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* OipService::RepositoryModelLoad(
    Ctx* c, const inference::RepositoryModelLoadRequest* req,
    inference::RepositoryModelLoadResponse* resp) {
  return Inline("RepositoryModelLoad", c, req, resp,
                [](const inference::RepositoryModelLoadRequest& q, auto*) {
                  // The models are built in and always loaded.
                  if (FindOipModel(q.model_name()) == nullptr) {
                    return ModelNotFound(q.model_name());
                  }
                  return absl::OkStatus();
                });
}

grpc::ServerUnaryReactor* OipService::RepositoryModelUnload(
    Ctx* c, const inference::RepositoryModelUnloadRequest* req,
    inference::RepositoryModelUnloadResponse* resp) {
  return Inline("RepositoryModelUnload", c, req, resp,
                [](const inference::RepositoryModelUnloadRequest& q, auto*) {
                  if (FindOipModel(q.model_name()) == nullptr) {
                    return ModelNotFound(q.model_name());
                  }
                  return absl::FailedPreconditionError(absl::StrCat(
                      "model '", q.model_name(), "' is built in and cannot be unloaded"));
                });
}

grpc::ServerUnaryReactor* OipService::SystemSharedMemoryStatus(
    Ctx* c, const inference::SystemSharedMemoryStatusRequest* req,
    inference::SystemSharedMemoryStatusResponse* resp) {
  return Inline("SystemSharedMemoryStatus", c, req, resp,
                [this](const inference::SystemSharedMemoryStatusRequest& q, auto* r,
                       const Principal& p) {
                  absl::StatusOr<std::vector<SharedRegionInfo>> regions =
                      shm_->Status(q.name(), RegionType::kSystem, RegionUserOf(p));
                  if (!regions.ok()) return regions.status();
                  for (const SharedRegionInfo& info : *regions) {
                    auto& out = (*r->mutable_regions())[info.name];
                    out.set_name(info.name);
                    out.set_key(info.key);
                    out.set_offset(static_cast<uint64_t>(info.offset));
                    out.set_byte_size(static_cast<uint64_t>(info.byte_size));
                  }
                  return absl::OkStatus();
                });
}

grpc::ServerUnaryReactor* OipService::SystemSharedMemoryRegister(
    Ctx* c, const inference::SystemSharedMemoryRegisterRequest* req,
    inference::SystemSharedMemoryRegisterResponse* resp) {
  return Inline(
      "SystemSharedMemoryRegister", c, req, resp,
      [this](const inference::SystemSharedMemoryRegisterRequest& q, auto*, const Principal& p) {
        constexpr uint64_t kMax = static_cast<uint64_t>(INT64_MAX);
        if (q.offset() > kMax || q.byte_size() > kMax) {
          return absl::InvalidArgumentError("offset and byte_size must fit in int64");
        }
        return shm_->Register(q.name(), q.key(), static_cast<int64_t>(q.offset()),
                              static_cast<int64_t>(q.byte_size()), p.name);
      });
}

grpc::ServerUnaryReactor* OipService::SystemSharedMemoryUnregister(
    Ctx* c, const inference::SystemSharedMemoryUnregisterRequest* req,
    inference::SystemSharedMemoryUnregisterResponse* resp) {
  return Inline("SystemSharedMemoryUnregister", c, req, resp,
                [this](const inference::SystemSharedMemoryUnregisterRequest& q, auto*,
                       const Principal& p) {
                  return shm_->Unregister(q.name(), RegionType::kSystem, RegionUserOf(p));
                });
}

grpc::ServerUnaryReactor* OipService::CudaSharedMemoryStatus(
    Ctx* c, const inference::CudaSharedMemoryStatusRequest* req,
    inference::CudaSharedMemoryStatusResponse* resp) {
  return Inline("CudaSharedMemoryStatus", c, req, resp,
                [this](const inference::CudaSharedMemoryStatusRequest& q, auto* r,
                       const Principal& p) {
                  return DeviceRegionStatus(*shm_, RegionUserOf(p), q, r);
                });
}

grpc::ServerUnaryReactor* OipService::CudaSharedMemoryRegister(
    Ctx* c, const inference::CudaSharedMemoryRegisterRequest* req,
    inference::CudaSharedMemoryRegisterResponse* resp) {
  return Inline("CudaSharedMemoryRegister", c, req, resp,
                [this](const inference::CudaSharedMemoryRegisterRequest& q, auto*,
                       const Principal& p) {
                  return RegisterDeviceRegion(shm_, backend_.name, p.name, q);
                });
}

grpc::ServerUnaryReactor* OipService::CudaSharedMemoryUnregister(
    Ctx* c, const inference::CudaSharedMemoryUnregisterRequest* req,
    inference::CudaSharedMemoryUnregisterResponse* resp) {
  return Inline("CudaSharedMemoryUnregister", c, req, resp,
                [this](const inference::CudaSharedMemoryUnregisterRequest& q, auto*,
                       const Principal& p) {
                  return shm_->Unregister(q.name(), RegionType::kDevice, RegionUserOf(p));
                });
}

}  // namespace conv1d
