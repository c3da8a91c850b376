// Conv1dService: the gRPC callback-API implementation of conv1d.v1.Conv1d.
//
// Forward, Backward and Update validate the request (validation.h), size the
// response, and submit a Task whose views point into the request and the
// response; the handler returns at once and the call is finished from the
// Task's on_done on a scheduler lane thread, so no reactor ever blocks on
// compute. gRPC keeps the request and response alive until the call is
// finished, and the call is finished only after the backend has written its
// outputs, which is what makes the zero-copy views safe. A registered weight
// set is held by the Task's keepalive.
//
// The registry RPCs (RegisterWeights, UnregisterWeights, ListWeights) and
// ServerInfo are answered inline: they touch only host memory.
//
// Errors reach the client through status_mapping.h only. Observer hooks:
// OnRequestStart / OnRequestDone for every RPC, OnRejected(kInvalid) for a
// failed validation and OnRejected(kTooLarge) for a request over the size
// limit or refused by Backend::CanServe (the scheduler reports its own
// rejections).
//
// Thread-safety: handlers run concurrently on gRPC's threads; the service
// holds no mutable state besides an atomic task counter. The scheduler,
// registry, backend and observer are not owned and must outlive the
// grpc::Server the service is registered with.
#ifndef CONV1D_SERVER_FRONTEND_CONV1D_SERVICE_H_
#define CONV1D_SERVER_FRONTEND_CONV1D_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "conv1d/v1/conv1d.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "server/core/backend.h"
#include "server/core/observer.h"
#include "server/core/scheduler.h"
#include "server/core/weight_registry.h"
#include "server/frontend/validation.h"

namespace conv1d {

struct ServiceOptions {
  ValidationLimits limits;
  // Reported by ServerInfo.
  std::string version;
};

class Conv1dService final : public v1::Conv1d::CallbackService {
 public:
  // REQUIRES: every pointer non-null and outliving the service.
  Conv1dService(const ServiceOptions& options, Scheduler* scheduler,
                WeightRegistry* registry, Backend* backend, Observer* observer);

  grpc::ServerUnaryReactor* Forward(grpc::CallbackServerContext* context,
                                    const v1::ForwardRequest* request,
                                    v1::ForwardResponse* response) override;
  grpc::ServerUnaryReactor* Backward(grpc::CallbackServerContext* context,
                                     const v1::BackwardRequest* request,
                                     v1::BackwardResponse* response) override;
  grpc::ServerUnaryReactor* Update(grpc::CallbackServerContext* context,
                                   const v1::UpdateRequest* request,
                                   v1::UpdateResponse* response) override;
  grpc::ServerUnaryReactor* RegisterWeights(
      grpc::CallbackServerContext* context,
      const v1::RegisterWeightsRequest* request,
      v1::RegisterWeightsResponse* response) override;
  grpc::ServerUnaryReactor* UnregisterWeights(
      grpc::CallbackServerContext* context,
      const v1::UnregisterWeightsRequest* request,
      v1::UnregisterWeightsResponse* response) override;
  grpc::ServerUnaryReactor* ListWeights(grpc::CallbackServerContext* context,
                                        const v1::ListWeightsRequest* request,
                                        v1::ListWeightsResponse* response) override;
  grpc::ServerUnaryReactor* ServerInfo(grpc::CallbackServerContext* context,
                                       const v1::ServerInfoRequest* request,
                                       v1::ServerInfoResponse* response) override;

 private:
  // Validates, binds and submits one compute call; `validate` and `bind` are
  // the op's functions from validation.h.
  template <typename Request, typename Response, typename Validate, typename Bind>
  grpc::ServerUnaryReactor* Compute(const char* method,
                                    grpc::CallbackServerContext* context,
                                    const Request* request, Response* response,
                                    Validate validate, Bind bind);

  // Reports the outcome and finishes the call. After this returns, the
  // request, response and context may be gone.
  void Finish(grpc::ServerUnaryReactor* reactor,
              grpc::CallbackServerContext* context, const char* method,
              absl::Time start, int64_t bytes_received,
              const google::protobuf::Message* response,
              const absl::Status& status);

  const ServiceOptions options_;
  Scheduler* const scheduler_;
  WeightRegistry* const registry_;
  Backend* const backend_;
  Observer* const observer_;
  std::atomic<uint64_t> next_task_id_{1};
};

}  // namespace conv1d

#endif  // CONV1D_SERVER_FRONTEND_CONV1D_SERVICE_H_
