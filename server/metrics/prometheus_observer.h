// PrometheusObserver: the Observer that turns the server's hooks into
// Prometheus metrics (prometheus-cpp) and serves them as text exposition on
// their own HTTP port (`--metrics_listen`, default 127.0.0.1:8002, /metrics),
// or HTTPS through MetricsTlsProxy (metrics_tls.h).
// The port's web server runs
// kMetricsThreads threads and drops a connection that sends no complete
// request within kMetricsRequestTimeoutMs, so idle or slow connections do
// not hold up scrapes.
// Every metric is listed in docs/metrics.md; the standard process_* metrics
// come from ProcessCollector.
//
// Used by the server's main: it creates one, hands it to the frontend, the
// scheduler, the weight registry and the backends as their Observer, and
// keeps it alive until all of them are gone.
//
// Thread-safety: every hook may be called concurrently from any thread.
// Hooks take no lock shared by all requests: labelled series are created
// once (known methods, codes and reasons up front; op×dtype families, lanes,
// pools and devices on first use) and afterwards reached through lock-free
// tables. Counters and gauges are atomics; each histogram child has its own
// small lock inside prometheus-cpp. Render() and scrapes may run at any time.
#ifndef CONV1D_SERVER_METRICS_PROMETHEUS_OBSERVER_H_
#define CONV1D_SERVER_METRICS_PROMETHEUS_OBSERVER_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "prometheus/counter.h"
#include "prometheus/exposer.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "server/core/observer.h"
#include "server/metrics/lazy_children.h"
#include "server/metrics/session_metrics.h"
#include "server/metrics/metrics_tls.h"
#include "server/metrics/process_collector.h"

namespace conv1d {

// Web server threads of the metrics port: each serves one connection at a
// time, so this many idle connections (up to the timeout below) are needed
// to delay a scrape.
inline constexpr int kMetricsThreads = 8;
// A connection that has not sent a whole request by then is closed.
inline constexpr int kMetricsRequestTimeoutMs = 5000;

struct MetricsOptions {
  // host:port for the HTTP endpoint; port 0 picks a free port (see
  // bound_port()). Empty: collect only, serve nothing (Render() still works).
  std::string listen_address = "127.0.0.1:8002";
  // HTTPS (metrics_tls.h): PEM certificate chain and key, both or neither;
  // with a client CA, scrapers must present a certificate signed by it.
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_client_ca_file;
  // Reported as labels of conv1d_build_info.
  std::string version;
  std::string git_sha;
  std::string backend;
  std::vector<std::string> devices;
};

class PrometheusObserver final : public Observer {
 public:
  // Fails (INVALID_ARGUMENT, naming the address) when the port cannot be
  // bound, UNAVAILABLE when the TLS files cannot be loaded.
  static absl::StatusOr<std::unique_ptr<PrometheusObserver>> Create(
      const MetricsOptions& options);
  ~PrometheusObserver() override;

  PrometheusObserver(const PrometheusObserver&) = delete;
  PrometheusObserver& operator=(const PrometheusObserver&) = delete;

  // Replaces the backend and devices labels of conv1d_build_info. Lets the
  // server create the observer before the backend (so the backend can
  // report pool bytes and device errors from its start) and name the
  // backend once it exists. Thread-safe; not for the request path.
  void SetBuildInfo(const std::string& backend,
                    const std::vector<std::string>& devices);

  // The TCP port actually listened on; 0 when not serving.
  int bound_port() const { return bound_port_; }
  // The current text exposition, exactly what a scrape of /metrics returns.
  std::string Render() const;

  // Observer.
  void OnRequestStart(const char* method) override;
  void OnRequestDone(const char* method, absl::StatusCode code,
                     absl::Duration latency, int64_t bytes_received,
                     int64_t bytes_sent) override;
  void OnRejected(RejectReason reason) override;
  void OnQueueDepth(const std::string& family, int64_t depth) override;
  void OnTaskDequeued(const BatchKey& key, absl::Duration queue_time) override;
  void OnBatchDone(int lane, const BatchKey& key, int32_t requests,
                   int64_t sequences, int64_t bytes, const BatchStats& stats,
                   absl::Duration busy) override;
  void OnWeightsChanged(int64_t sets, int64_t bytes) override;
  void OnPoolBytes(const char* pool, int device, int64_t bytes) override;
  void OnDeviceError(int device, const std::string& message) override;
  void OnHostPoolMiss(int64_t bytes) override;
  void OnServingChanged(bool serving) override;
  void OnSessionEvent(SessionEvent event, int64_t open_sessions,
                      int64_t slot_bytes_in_use) override {
    sessions_->OnEvent(event, open_sessions, slot_bytes_in_use);
  }
  void OnSessionStep(absl::Duration latency) override { sessions_->OnStep(latency); }
  void OnSessionStepsPerLaunch(int32_t steps) override {
    sessions_->OnStepsPerLaunch(steps);
  }

  // Histogram bucket bounds, exposed for tests and docs.
  static std::vector<double> DurationBuckets();  // 10 µs .. 10 s
  static std::vector<double> CountBuckets();     // 1 .. 16384, powers of 2
  static std::vector<double> ByteBuckets();      // 1 KiB .. 4 GiB, powers of 4

 private:
  static constexpr int kNumCodes = 17;  // absl::StatusCode 0..16
  static constexpr size_t kFastLanes = 256;
  static constexpr size_t kFastDevices = 64;
  // device_reserved, device_in_use, pinned, host_in_use
  static constexpr size_t kNumPools = 4;
  static constexpr size_t kNumFamilies = 3 * 3;  // Op × DType

  // Series of one RPC method.
  struct MethodSeries {
    std::string name;
    LazySlots<prometheus::Counter, kNumCodes> requests;
    prometheus::Histogram* latency = nullptr;
    prometheus::Gauge* in_flight = nullptr;
    prometheus::Counter* received_bytes = nullptr;
    prometheus::Counter* sent_bytes = nullptr;
  };
  // Series of one batch-key family ("forward/fp32").
  struct FamilySeries {
    prometheus::Gauge* queue_depth = nullptr;
    prometheus::Histogram* queue_seconds = nullptr;
    prometheus::Histogram* pack_seconds = nullptr;
    prometheus::Histogram* compute_seconds = nullptr;
    prometheus::Histogram* h2d_seconds = nullptr;
    prometheus::Histogram* d2h_seconds = nullptr;
    prometheus::Counter* h2d_bytes = nullptr;
    prometheus::Counter* d2h_bytes = nullptr;
    prometheus::Histogram* batch_requests = nullptr;
    prometheus::Histogram* batch_sequences = nullptr;
    prometheus::Histogram* batch_bytes = nullptr;
    prometheus::Counter* launches = nullptr;
  };

  PrometheusObserver();
  // Creates the series of every known method (kKnownMethods).
  void AddKnownMethods();
  void BuildFamilies(const MetricsOptions& options);

  MethodSeries* Method(const char* method);
  std::unique_ptr<MethodSeries> NewMethod(const std::string& name);
  FamilySeries* Family(const BatchKey& key);
  FamilySeries* FamilyByName(const std::string& family);
  std::unique_ptr<FamilySeries> NewFamily(const std::string& family);
  template <typename T>
  T* Keep(std::unique_ptr<T> owned, std::vector<std::unique_ptr<T>>* storage);
  prometheus::Gauge* Pool(const char* pool, int device);

  // Declared first so that it outlives every pointer below and the exposer.
  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<ProcessCollector> process_;  // process_* metrics, read on scrape

  absl::Mutex build_info_mu_;
  prometheus::Family<prometheus::Gauge>* build_info_family_ = nullptr;
  prometheus::Gauge* build_info_ ABSL_GUARDED_BY(build_info_mu_) = nullptr;
  std::string version_, git_sha_;  // set once in BuildFamilies

  prometheus::Family<prometheus::Counter>* requests_total_ = nullptr;
  prometheus::Family<prometheus::Histogram>* request_seconds_ = nullptr;
  prometheus::Family<prometheus::Gauge>* in_flight_ = nullptr;
  prometheus::Family<prometheus::Counter>* received_bytes_ = nullptr;
  prometheus::Family<prometheus::Counter>* sent_bytes_ = nullptr;
  prometheus::Family<prometheus::Gauge>* queue_depth_ = nullptr;
  prometheus::Family<prometheus::Histogram>* queue_seconds_ = nullptr;
  prometheus::Family<prometheus::Histogram>* pack_seconds_ = nullptr;
  prometheus::Family<prometheus::Histogram>* compute_seconds_ = nullptr;
  prometheus::Family<prometheus::Histogram>* copy_seconds_ = nullptr;
  prometheus::Family<prometheus::Counter>* copy_bytes_ = nullptr;
  prometheus::Family<prometheus::Histogram>* batch_requests_ = nullptr;
  prometheus::Family<prometheus::Histogram>* batch_sequences_ = nullptr;
  prometheus::Family<prometheus::Histogram>* batch_bytes_ = nullptr;
  prometheus::Family<prometheus::Counter>* launches_ = nullptr;
  prometheus::Family<prometheus::Counter>* lane_busy_ = nullptr;
  prometheus::Family<prometheus::Gauge>* pool_bytes_ = nullptr;
  prometheus::Family<prometheus::Counter>* device_errors_ = nullptr;
  prometheus::Counter* host_pool_misses_ = nullptr;
  std::unique_ptr<SessionMetrics> sessions_;

  // Known methods, in a fixed order; others land in extra_methods_.
  std::vector<std::unique_ptr<MethodSeries>> methods_;
  LabelMap<MethodSeries> extra_methods_;
  std::vector<std::unique_ptr<MethodSeries>> extra_method_storage_
      ABSL_GUARDED_BY(storage_mu_);
  // Indexed by op * 3 + x_dtype; unknown family strings in extra_families_.
  LazySlots<FamilySeries, kNumFamilies> families_;
  LabelMap<FamilySeries> extra_families_;
  std::vector<std::unique_ptr<FamilySeries>> family_storage_
      ABSL_GUARDED_BY(storage_mu_);
  absl::Mutex storage_mu_;

  std::array<prometheus::Counter*, 7> rejections_{};  // by RejectReason
  LazySlots<prometheus::Counter, kFastLanes> lanes_;
  LabelMap<prometheus::Counter> extra_lanes_;
  LazySlots<prometheus::Gauge, kNumPools * kFastDevices> pools_;
  LabelMap<prometheus::Gauge> extra_pools_;
  LazySlots<prometheus::Counter, kFastDevices> device_errors_by_index_;
  LabelMap<prometheus::Counter> extra_device_errors_;
  prometheus::Gauge* weight_sets_ = nullptr;
  prometheus::Gauge* weight_bytes_ = nullptr;
  prometheus::Gauge* serving_ = nullptr;

  // Declared last: destroyed first, so no scrape runs during teardown.
  std::unique_ptr<prometheus::Exposer> exposer_;
  int bound_port_ = 0;     // what scrapers connect to
  int exporter_port_ = 0;  // the exporter's own (loopback with TLS)
  std::string wake_host_;  // where to connect to unblock the exporter on stop
  std::unique_ptr<MetricsTlsProxy> tls_proxy_;
};

}  // namespace conv1d

#endif  // CONV1D_SERVER_METRICS_PROMETHEUS_OBSERVER_H_
