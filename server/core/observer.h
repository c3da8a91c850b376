// Observer: the hooks through which the frontend, the scheduler, the weight
// registry and the backends report what happens, without knowing who
// listens. The metrics layer implements it; NoopObserver is the default.
//
// Thread-safety: every method may be called concurrently from any thread,
// including hot paths (reactor threads, lane threads); implementations must
// be thread-safe, non-blocking and cheap (no global lock per call).
#ifndef CONV1D_SERVER_CORE_OBSERVER_H_
#define CONV1D_SERVER_CORE_OBSERVER_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/core/backend.h"
#include "server/core/conv_problem.h"

namespace conv1d {

// Why a request was turned away before compute.
enum class RejectReason : uint8_t {
  kInvalid = 0,    // failed validation
  kQueueFull = 1,  // max_queued_requests reached
  kDeadline = 2,   // deadline passed while queued
  kCancelled = 3,  // client went away while queued
  kTooLarge = 4,   // larger than the backend can ever serve
  kDraining = 5,   // server shutting down
};
const char* RejectReasonName(RejectReason r);  // "invalid", "queue_full", ...

// What happened to a decode session.
enum class SessionEvent : uint8_t {
  kOpened = 0,   // opened or forked
  kClosed = 1,   // closed by its client, its stream's end or the drain
  kExpired = 2,  // idle past the idle timeout
  kFailed = 3,   // a step failed in the backend; state lost
};
const char* SessionEventName(SessionEvent e);  // "opened", "closed", ...

class Observer {
 public:
  virtual ~Observer() = default;

  // Frontend: `method` is the RPC name ("Forward", "Backward", ...).
  virtual void OnRequestStart(const char* method) {}
  virtual void OnRequestDone(const char* method, absl::StatusCode code,
                             absl::Duration latency, int64_t bytes_received,
                             int64_t bytes_sent) {}
  virtual void OnRejected(RejectReason reason) {}

  // Scheduler. `family` is BatchKey::Family() ("forward/fp32").
  virtual void OnQueueDepth(const std::string& family, int64_t depth) {}
  virtual void OnTaskDequeued(const BatchKey& key, absl::Duration queue_time) {}
  virtual void OnBatchDone(int lane, const BatchKey& key, int32_t requests,
                           int64_t sequences, int64_t bytes,
                           const BatchStats& stats, absl::Duration busy) {}

  // Weight registry: totals after a change.
  virtual void OnWeightsChanged(int64_t sets, int64_t bytes) {}

  // Backend memory pools. `pool` is "device_reserved", "device_in_use",
  // "pinned" or "host_in_use" (request and response tensors in the
  // page-locked host pool); `device` is the device index (the first
  // device's for the host pool, which all devices share).
  virtual void OnPoolBytes(const char* pool, int device, int64_t bytes) {}
  // Backend: a tensor buffer of `bytes` could not come from the page-locked
  // host pool (no room left for its size) and was taken from ordinary
  // memory, so it is packed through staging instead of moving by DMA.
  virtual void OnHostPoolMiss(int64_t bytes) {}

  // Backend health: a device hit an error it cannot recover from.
  virtual void OnDeviceError(int device, const std::string& message) {}

  // Sessions (session_manager.h): an event, and the totals after it (open
  // sessions, bytes of the state slots they hold).
  virtual void OnSessionEvent(SessionEvent event, int64_t open_sessions,
                              int64_t slot_bytes_in_use) {}
  // A session step finished (OK): its latency from BeginStep to its task's
  // end.
  virtual void OnSessionStep(absl::Duration latency) {}
  // Scheduler: a backend call that computed `steps` session steps (> 0).
  virtual void OnSessionStepsPerLaunch(int32_t steps) {}

  // Frontend: the serving state that grpc.health.v1 reports changed (true
  // once the server accepts requests, false while draining / NOT_SERVING).
  virtual void OnServingChanged(bool serving) {}
};

class NoopObserver final : public Observer {};

}  // namespace conv1d

#endif  // CONV1D_SERVER_CORE_OBSERVER_H_
