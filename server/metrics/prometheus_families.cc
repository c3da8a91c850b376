// PrometheusObserver's metric families: the histogram bucket layouts and
// the registration of every family at start-up (BuildFamilies). Split from
// prometheus_observer.cc, which holds the hooks that update them; the
// thread-safety contract is the class's (prometheus_observer.h).
#include <cmath>
#include <memory>

#include "absl/time/clock.h"
#include "server/metrics/prometheus_observer.h"

namespace conv1d {

std::vector<double> PrometheusObserver::DurationBuckets() {
  std::vector<double> b;
  for (double decade = 1e-5; decade < 10; decade *= 10) {
    b.push_back(decade);
    b.push_back(2.5 * decade);
    b.push_back(5 * decade);
  }
  b.push_back(10);
  return b;
}

std::vector<double> PrometheusObserver::CountBuckets() {
  std::vector<double> b;
  for (double v = 1; v <= 16384; v *= 2) b.push_back(v);
  return b;
}

std::vector<double> PrometheusObserver::ByteBuckets() {
  std::vector<double> b;
  for (double v = 1024; v <= 4.0 * 1024 * 1024 * 1024; v *= 4) b.push_back(v);
  return b;
}

void PrometheusObserver::BuildFamilies(const MetricsOptions& options) {
  prometheus::Registry& r = *registry_;
  using prometheus::BuildCounter;
  using prometheus::BuildGauge;
  using prometheus::BuildHistogram;

  version_ = options.version;
  git_sha_ = options.git_sha;
  sessions_ = std::make_unique<SessionMetrics>(r, DurationBuckets(), CountBuckets());
  build_info_family_ =
      &BuildGauge()
           .Name("conv1d_build_info")
           .Help("Always 1; labels carry the server's version, source revision, "
                 "backend and devices.")
           .Register(r);
  SetBuildInfo(options.backend, options.devices);
  BuildGauge()
      .Name("conv1d_start_time_seconds")
      .Help("Unix time at which the metrics of this server process started.")
      .Register(r)
      .Add({})
      .Set(absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()));
  serving_ = &BuildGauge()
                  .Name("conv1d_health_serving")
                  .Help("1 while the health service reports SERVING, 0 while "
                        "starting or draining (NOT_SERVING).")
                  .Register(r)
                  .Add({});

  requests_total_ = &BuildCounter()
                         .Name("conv1d_requests_total")
                         .Help("Finished RPCs by method and gRPC status code.")
                         .Register(r);
  request_seconds_ =
      &BuildHistogram()
           .Name("conv1d_request_duration_seconds")
           .Help("RPC latency seen by the server, from the handler's start to "
                 "the response, by method.")
           .Register(r);
  in_flight_ = &BuildGauge()
                    .Name("conv1d_requests_in_flight")
                    .Help("RPCs started and not yet finished, by method.")
                    .Register(r);
  received_bytes_ = &BuildCounter()
                         .Name("conv1d_received_bytes_total")
                         .Help("Request message bytes received, by method.")
                         .Register(r);
  sent_bytes_ = &BuildCounter()
                     .Name("conv1d_sent_bytes_total")
                     .Help("Response message bytes sent, by method.")
                     .Register(r);

  auto& rejections =
      BuildCounter()
          .Name("conv1d_rejections_total")
          .Help("Requests turned away before compute, by reason.")
          .Register(r);
  for (int i = 0; i < static_cast<int>(rejections_.size()); ++i) {
    rejections_[i] = &rejections.Add(
        {{"reason", RejectReasonName(static_cast<RejectReason>(i))}});
  }

  queue_depth_ = &BuildGauge()
                      .Name("conv1d_queue_depth")
                      .Help("Tasks waiting in the scheduler, by batch-key "
                            "family (op/dtype).")
                      .Register(r);
  queue_seconds_ = &BuildHistogram()
                        .Name("conv1d_request_queue_seconds")
                        .Help("Time a task waited in the scheduler queue "
                              "before its batch started, by family.")
                        .Register(r);
  pack_seconds_ = &BuildHistogram()
                       .Name("conv1d_pack_seconds")
                       .Help("Time to pack one batch into staging memory, by "
                             "family.")
                       .Register(r);
  compute_seconds_ = &BuildHistogram()
                          .Name("conv1d_compute_seconds")
                          .Help("Kernel (or CPU compute) time of one fused "
                                "batch, by family.")
                          .Register(r);
  copy_seconds_ = &BuildHistogram()
                       .Name("conv1d_copy_seconds")
                       .Help("Host-device copy time of one batch, by family "
                             "and direction (h2d, d2h).")
                       .Register(r);
  copy_bytes_ = &BuildCounter()
                     .Name("conv1d_copy_bytes_total")
                     .Help("Bytes copied between host and device, by family "
                           "and direction (h2d, d2h).")
                     .Register(r);
  batch_requests_ = &BuildHistogram()
                         .Name("conv1d_batch_requests")
                         .Help("Requests fused into one backend batch, by "
                               "family.")
                         .Register(r);
  batch_sequences_ = &BuildHistogram()
                          .Name("conv1d_batch_sequences")
                          .Help("Sequences (sum of B) in one backend batch, "
                                "by family.")
                          .Register(r);
  batch_bytes_ = &BuildHistogram()
                      .Name("conv1d_batch_bytes")
                      .Help("Tensor bytes read and written by one backend "
                            "batch, by family.")
                      .Register(r);
  launches_ = &BuildCounter()
                   .Name("conv1d_kernel_launches_total")
                   .Help("Kernel launches (CPU passes on the cpu backend), "
                         "by family.")
                   .Register(r);
  lane_busy_ = &BuildCounter()
                    .Name("conv1d_lane_busy_seconds_total")
                    .Help("Time each lane spent running batches; its rate is "
                          "the lane's utilisation.")
                    .Register(r);

  pool_bytes_ = &BuildGauge()
                     .Name("conv1d_pool_bytes")
                     .Help("Memory pool sizes by pool (device_reserved, "
                           "device_in_use, pinned, host_in_use) and device index.")
                     .Register(r);
  host_pool_misses_ = &BuildCounter()
                           .Name("conv1d_host_pool_misses_total")
                           .Help("Tensor buffers the page-locked host pool had no room "
                                 "for (taken from ordinary memory and staged instead).")
                           .Register(r)
                           .Add({});
  device_errors_ = &BuildCounter()
                        .Name("conv1d_device_errors_total")
                        .Help("Unrecoverable device errors, by device index.")
                        .Register(r);
  auto& weight_sets = BuildGauge()
                          .Name("conv1d_weight_sets")
                          .Help("Registered weight sets.")
                          .Register(r);
  weight_sets_ = &weight_sets.Add({});
  auto& weight_bytes = BuildGauge()
                           .Name("conv1d_weight_bytes")
                           .Help("Bytes held by registered weight sets.")
                           .Register(r);
  weight_bytes_ = &weight_bytes.Add({});

  AddKnownMethods();
}

}  // namespace conv1d
