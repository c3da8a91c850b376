// SessionCalls: the decode-session operations of conv1d.v1 in terms of its
// messages, shared by the Decode stream (decode_stream.h) and the unary
// session RPCs of Conv1dService. It validates (session_validation.h), drives
// the SessionManager, and submits steps to the scheduler as update tasks
// whose state views are the session's slot, so that steps of many sessions
// fuse into one backend call.
//
// It also keeps the set of open Decode streams, so that a drain can hand
// every stream its state before the server stops (DrainStreams).
//
// Asynchronous operations take a Done callback that runs exactly once with
// the outcome: on the calling thread when the operation fails or finishes
// at once, otherwise on a scheduler lane (or completion) thread. Their
// messages (request, response) must stay valid until Done has run.
//
// Thread-safety: every method is thread-safe. The manager, scheduler and
// registry are not owned and must outlive this object.
#ifndef CONV1D_SERVER_FRONTEND_SESSION_CALLS_H_
#define CONV1D_SERVER_FRONTEND_SESSION_CALLS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "conv1d/v1/conv1d.pb.h"
#include "server/core/backend.h"
#include "server/core/scheduler.h"
#include "server/core/session_manager.h"
#include "server/core/weight_registry.h"
#include "server/frontend/auth.h"
#include "server/frontend/session_validation.h"
#include "server/frontend/validation.h"
#include "server/frontend/wire_tensors.h"

namespace conv1d {

class DecodeStream;

class SessionCalls {
 public:
  using Done = absl::AnyInvocable<void(const absl::Status&)>;

  // `task_ids` numbers the tasks (shared with the other compute calls);
  // steps are checked against `backend_limits` like any request.
  SessionCalls(SessionManager* manager, Scheduler* scheduler, WeightRegistry* registry,
               const ValidationLimits& limits, const BackendLimits& backend_limits,
               std::atomic<uint64_t>* task_ids);

  SessionManager* manager() const { return manager_; }

  // Validates and opens a session (attached to a stream when `attached`)
  // owned by `principal`, runs the prefill if any, and fills *response;
  // *opened is the session (set before `done` runs, also when the prefill
  // then fails: the session is then closed). A weights_name must be a set
  // `principal` may use (auth.h's MayUseWeights: PERMISSION_DENIED).
  // `prefix` prefixes field names in errors.
  void Open(const v1::OpenSessionRequest& request, absl::string_view prefix,
            bool attached, const Principal& principal,
            v1::OpenSessionResponse* response, absl::Time deadline,
            std::function<bool()> cancelled, std::shared_ptr<Session>* opened, Done done);

  // One step: validates x (`field` names it) against the session, submits
  // the update task, writes y into *y. `detached` may be null.
  void Step(std::shared_ptr<Session> session, const v1::Tensor& x, bool has_x,
            absl::string_view field, const DetachedTensors* detached, v1::Tensor* y,
            absl::Time deadline, std::function<bool()> cancelled, Done done);

  // The state [B, D, K] into *conv_state.
  absl::Status Export(Session& session, v1::Tensor* conv_state);

  // Open Decode streams, for the drain.
  void AddStream(const std::shared_ptr<DecodeStream>& stream);
  void RemoveStream(DecodeStream* stream);
  // Asks every open stream to send its exported state and end with
  // UNAVAILABLE, and stops new streams (they end at once with UNAVAILABLE);
  // returns how many streams were asked.
  int DrainStreams();
  bool draining() const;

  const ValidationLimits& limits() const { return limits_; }
  const WeightRegistry& registry() const { return *registry_; }

 private:
  SessionManager* const manager_;
  Scheduler* const scheduler_;
  WeightRegistry* const registry_;
  const ValidationLimits limits_;
  const BackendLimits backend_limits_;
  std::atomic<uint64_t>* const task_ids_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<DecodeStream*, std::weak_ptr<DecodeStream>> streams_
      ABSL_GUARDED_BY(mu_);
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace conv1d

#endif  // CONV1D_SERVER_FRONTEND_SESSION_CALLS_H_
