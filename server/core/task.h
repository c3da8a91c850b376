// A Task is one client request on its way through the scheduler to a backend.
//
// The frontend builds a Task after validation: its BatchKey, its ConvSegment
// (input views into the received message, output views into the response),
// its deadline, a cancellation probe and a completion callback. The
// scheduler owns the Task from a successful Submit until it calls `on_done`
// exactly once (from a scheduler lane thread), then destroys it.
// A Task is touched by one thread at a time; `cancelled` must be safe to call
// from any thread.
#ifndef CONV1D_SERVER_CORE_TASK_H_
#define CONV1D_SERVER_CORE_TASK_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/core/conv_problem.h"

namespace conv1d {

// When each stage of a task happened; filled in by the scheduler and the
// backend, read by metrics and access logs in `on_done`.
struct TaskTimings {
  absl::Time enqueued = absl::InfinitePast();
  absl::Time batch_start = absl::InfinitePast();  // taken by a lane
  absl::Time batch_end = absl::InfinitePast();    // backend returned
  int32_t batch_requests = 0;                     // requests in its batch
  // The backend was called with this task's batch (its outputs may have
  // been written, even when the batch failed).
  bool reached_backend = false;
};

struct Task {
  uint64_t id = 0;  // unique per server lifetime; for logs
  BatchKey key;
  ConvSegment segment;
  absl::Time deadline = absl::InfiniteFuture();
  // Returns true once the client has gone away. May be empty.
  std::function<bool()> cancelled;
  // Called exactly once with the outcome. OK means every requested output in
  // `segment` was written.
  absl::AnyInvocable<void(const absl::Status&, const TaskTimings&)> on_done;
  // Keeps alive whatever the views point into (request message, registered
  // weight set) until the task is destroyed.
  std::shared_ptr<const void> keepalive;
  TaskTimings timings;
  // A decode session's step (session_manager.h): counted per backend call.
  bool session_step = false;

  int64_t bytes() const { return segment.bytes_moved(); }
};

// Calls the task's on_done with `status` and destroys the task.
inline void FinishTask(std::unique_ptr<Task> task, const absl::Status& status) {
  if (task->on_done) task->on_done(status, task->timings);
}

}  // namespace conv1d

#endif  // CONV1D_SERVER_CORE_TASK_H_
