#include "server/frontend/request_submit.h"

#include <chrono>
#include <utility>

#include "server/core/segment_check.h"

namespace conv1d {

absl::Time DeadlineOf(const grpc::ServerContextBase& context) {
  const std::chrono::system_clock::time_point tp = context.deadline();
  if (tp == std::chrono::system_clock::time_point::max()) {
    return absl::InfiniteFuture();
  }
  return absl::FromChrono(tp);
}

absl::Status RequestSubmitter::Admit(const ValidatedCall& call) const {
  absl::Status status = CheckRequestSize(call, limits_);
  if (!status.ok()) observer_->OnRejected(RejectReason::kTooLarge);
  return status;
}

absl::Status RequestSubmitter::Submit(ValidatedCall* call,
                                      std::shared_ptr<const void> keepalive,
                                      absl::Time deadline,
                                      std::function<bool()> cancelled, OnDone on_done) {
  absl::Status status = CheckServable(backend_, call->key, call->segment);
  if (!status.ok()) {
    // A malformed segment counts as invalid input; anything else (beyond
    // the backend's capacity) as too large for this server.
    observer_->OnRejected(absl::IsInvalidArgument(status) ? RejectReason::kInvalid
                                                          : RejectReason::kTooLarge);
    return status;
  }
  // Tensors in a registered device region bind the task to that device.
  absl::StatusOr<int32_t> device = DeviceAffinity(call->key, call->segment);
  if (!device.ok()) {
    observer_->OnRejected(RejectReason::kInvalid);
    return device.status();
  }
  call->key.device = *device;
  auto task = std::make_unique<Task>();
  task->id = next_task_id_.fetch_add(1, std::memory_order_relaxed);
  task->key = call->key;
  task->segment = std::move(call->segment);
  task->deadline = deadline;
  task->cancelled = std::move(cancelled);
  task->keepalive = std::move(keepalive);
  task->on_done = std::move(on_done);
  // On failure the task is still ours and is destroyed here without running
  // on_done; the scheduler has reported the rejection (queue full, draining).
  return scheduler_->Submit(&task);
}

}  // namespace conv1d
