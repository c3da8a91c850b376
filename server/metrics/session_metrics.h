// SessionMetrics: the Prometheus series of decode sessions, registered on
// the PrometheusObserver's registry and fed through its Observer hooks
// (OnSessionEvent, OnSessionStep, OnSessionStepsPerLaunch). docs/metrics.md
// lists them.
//
// Thread-safety: every method may be called concurrently (prometheus-cpp
// series are thread-safe); all series are created in the constructor.
#ifndef CONV1D_SERVER_METRICS_SESSION_METRICS_H_
#define CONV1D_SERVER_METRICS_SESSION_METRICS_H_

#include <array>
#include <cstdint>

#include "absl/time/time.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "server/core/observer.h"

namespace conv1d {

class SessionMetrics {
 public:
  // `duration_buckets` and `count_buckets` are the observer's bucket bounds.
  SessionMetrics(prometheus::Registry& registry, const std::vector<double>& duration_buckets,
                 const std::vector<double>& count_buckets);

  void OnEvent(SessionEvent event, int64_t open_sessions, int64_t slot_bytes_in_use);
  void OnStep(absl::Duration latency);
  void OnStepsPerLaunch(int32_t steps);

 private:
  prometheus::Gauge* open_ = nullptr;
  prometheus::Gauge* slot_bytes_ = nullptr;
  std::array<prometheus::Counter*, 4> events_{};  // by SessionEvent
  prometheus::Histogram* step_seconds_ = nullptr;
  prometheus::Histogram* steps_per_launch_ = nullptr;
};

}  // namespace conv1d

#endif  // CONV1D_SERVER_METRICS_SESSION_METRICS_H_
