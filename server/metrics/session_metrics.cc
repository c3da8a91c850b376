#include "server/metrics/session_metrics.h"

namespace conv1d {

SessionMetrics::SessionMetrics(prometheus::Registry& r,
                               const std::vector<double>& duration_buckets,
                               const std::vector<double>& count_buckets) {
  using prometheus::BuildCounter;
  using prometheus::BuildGauge;
  using prometheus::BuildHistogram;
  open_ = &BuildGauge()
               .Name("conv1d_sessions_open")
               .Help("Decode sessions holding a state slot now.")
               .Register(r)
               .Add({});
  slot_bytes_ = &BuildGauge()
                     .Name("conv1d_session_slot_bytes")
                     .Help("Bytes of the state slots held by open decode sessions.")
                     .Register(r)
                     .Add({});
  auto& events = BuildCounter()
                     .Name("conv1d_sessions_total")
                     .Help("Decode sessions by what happened: opened (or forked), "
                           "closed, expired (idle timeout), failed (a step failed "
                           "in the backend; the session was closed).")
                     .Register(r);
  for (SessionEvent e : {SessionEvent::kOpened, SessionEvent::kClosed,
                         SessionEvent::kExpired, SessionEvent::kFailed}) {
    events_[static_cast<size_t>(e)] = &events.Add({{"event", SessionEventName(e)}});
  }
  step_seconds_ = &BuildHistogram()
                       .Name("conv1d_session_step_duration_seconds")
                       .Help("Decode-session step latency in the server, from the "
                             "step's validation to its computed answer.")
                       .Register(r)
                       .Add({}, duration_buckets);
  steps_per_launch_ = &BuildHistogram()
                           .Name("conv1d_session_steps_per_launch")
                           .Help("Decode-session steps computed by one backend call "
                                 "(fused launch), for calls with at least one.")
                           .Register(r)
                           .Add({}, count_buckets);
}

void SessionMetrics::OnEvent(SessionEvent event, int64_t open_sessions,
                             int64_t slot_bytes_in_use) {
  // kFailed is followed by the session's kClosed; it adds no change of its own.
  events_[static_cast<size_t>(event)]->Increment();
  open_->Set(static_cast<double>(open_sessions));
  slot_bytes_->Set(static_cast<double>(slot_bytes_in_use));
}

void SessionMetrics::OnStep(absl::Duration latency) {
  step_seconds_->Observe(absl::ToDoubleSeconds(latency));
}

void SessionMetrics::OnStepsPerLaunch(int32_t steps) {
  steps_per_launch_->Observe(static_cast<double>(steps));
}

}  // namespace conv1d
