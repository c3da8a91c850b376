// RequestSubmitter: the one path from a validated compute request to the
// scheduler, shared by both protocol frontends (conv1d.v1's Conv1dService and
// the Open Inference Protocol's OipService), so that requests of either
// protocol pass the same admission checks, get task ids from one counter and
// fuse into the same backend launches.
//
// A frontend parses and validates its request into a ValidatedCall
// (validation.h), then calls Admit before allocating outputs (size limit),
// binds the outputs, and calls Submit (the backend's own limits, then the
// scheduler). Rejections found here are reported to the observer
// (OnRejected kTooLarge or kInvalid); the scheduler reports its own.
//
// Thread-safety: all methods are thread-safe; the scheduler, backend and
// observer are not owned and must outlive the submitter.
#ifndef CONV1D_SERVER_FRONTEND_REQUEST_SUBMIT_H_
#define CONV1D_SERVER_FRONTEND_REQUEST_SUBMIT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "server/core/backend.h"
#include "server/core/observer.h"
#include "server/core/scheduler.h"
#include "server/core/task.h"
#include "server/frontend/validation.h"

namespace conv1d {

// The call's deadline as an absl::Time (InfiniteFuture when it has none).
absl::Time DeadlineOf(const grpc::ServerContextBase& context);

class RequestSubmitter {
 public:
  using OnDone = absl::AnyInvocable<void(const absl::Status&, const TaskTimings&)>;

  // `backend`: the backend's limits, read once at start-up. REQUIRES: the
  // pointers non-null and outliving the submitter.
  RequestSubmitter(const ValidationLimits& limits, const BackendLimits& backend,
                   Scheduler* scheduler, Observer* observer)
      : limits_(limits), backend_(backend), scheduler_(scheduler), observer_(observer) {}

  const ValidationLimits& limits() const { return limits_; }

  // The task-id sequence, for callers that build their own tasks (decode
  // session steps), so that ids stay unique across the server.
  std::atomic<uint64_t>* task_ids() { return &next_task_id_; }

  // The request's size against max_request_bytes; call before allocating
  // its outputs. INVALID_ARGUMENT (reported as kTooLarge) when over.
  absl::Status Admit(const ValidatedCall& call) const;

  // The segment against the backend's limits (CheckServable), then a Task (key and segment moved out of `call`,
  // `keepalive` holding whatever its views point into) submitted to the
  // scheduler. On OK, `on_done` runs exactly once from a lane thread, after
  // which the task and `keepalive` are released. On an error nothing was
  // submitted and `on_done` never runs.
  // REQUIRES: Admit(*call) returned OK and the outputs are bound.
  absl::Status Submit(ValidatedCall* call, std::shared_ptr<const void> keepalive,
                      absl::Time deadline, std::function<bool()> cancelled,
                      OnDone on_done);

  // A task built by the caller (a decode session's step, key and segment
  // from SessionManager::BeginStep): the backend's limits, a task id, then
  // the scheduler. On an error the task (with its on_done, not run) is
  // still the caller's in *task.
  absl::Status SubmitTask(std::unique_ptr<Task>* task);

 private:
  const ValidationLimits limits_;
  const BackendLimits backend_;
  Scheduler* const scheduler_;
  Observer* const observer_;
  std::atomic<uint64_t> next_task_id_{1};
};

}  // namespace conv1d

#endif  // CONV1D_SERVER_FRONTEND_REQUEST_SUBMIT_H_
