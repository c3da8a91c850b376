#include "server/metrics/prometheus_observer.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <exception>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "prometheus/text_serializer.h"

namespace conv1d {
namespace {

// The RPCs of conv1d.v1.Conv1d; their series exist from start-up so that
// rate() and increase() see a zero before the first request.
constexpr const char* kKnownMethods[] = {
    "Forward",     "Backward",    "Update",    "RegisterWeights",
    "UnregisterWeights", "ListWeights", "ServerInfo", "Decode", "OpenSession",
    "CommitSession", "ForkSession", "ExportSession", "CloseSession"};

// Codes whose series are created up front for every method: the ones the
// service returns in normal operation, so error ratios start from zero.
constexpr absl::StatusCode kCommonCodes[] = {
    absl::StatusCode::kOk,               absl::StatusCode::kCancelled,
    absl::StatusCode::kInvalidArgument,  absl::StatusCode::kDeadlineExceeded,
    absl::StatusCode::kNotFound,         absl::StatusCode::kResourceExhausted,
    absl::StatusCode::kInternal,         absl::StatusCode::kUnavailable};

constexpr const char* kPools[] = {"device_reserved", "device_in_use", "pinned", "host_in_use"};

constexpr int kNumOps = 3;
constexpr Op kOps[kNumOps] = {Op::kForward, Op::kBackward, Op::kUpdate};
constexpr DType kDTypes[kNumDTypes] = {DType::kF32, DType::kF16, DType::kBF16};

std::string FamilyName(size_t index) {
  return absl::StrCat(OpName(kOps[index / kNumDTypes]), "/",
                      DTypeName(kDTypes[index % kNumDTypes]));
}

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

// Connects to the metrics listener and closes at once. civetweb's listener
// thread polls with a 2 s period and checks for shutdown only when it wakes;
// a connection wakes it, so stopping takes milliseconds instead of seconds.
void PokeListener(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), absl::StrCat(port).c_str(), &hints, &found) != 0) {
    return;
  }
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const bool connected = connect(fd, a->ai_addr, a->ai_addrlen) == 0;
    close(fd);
    if (connected) break;
  }
  freeaddrinfo(found);
}

// The host to connect to for a listen address "host:port" ("0.0.0.0:8002",
// "[::]:8002", "10.0.0.5:8002", ":8002").
std::string WakeHost(const std::string& listen_address) {
  const size_t colon = listen_address.rfind(':');
  std::string host = colon == std::string::npos ? "" : listen_address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
    return host == "::" ? "::1" : host;
  }
  if (host.empty() || host == "0.0.0.0" || host == "*") return "127.0.0.1";
  return host;
}

}  // namespace

PrometheusObserver::PrometheusObserver()
    : registry_(std::make_shared<prometheus::Registry>()),
      process_(std::make_shared<ProcessCollector>()) {}

PrometheusObserver::~PrometheusObserver() {
  tls_proxy_.reset();  // before the exporter it forwards to
  if (exposer_ == nullptr || exporter_port_ <= 0) return;
  std::atomic<bool> stopped{false};
  std::thread waker([&] {
    while (!stopped.load(std::memory_order_acquire)) {
      PokeListener(wake_host_, exporter_port_);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  exposer_.reset();
  stopped.store(true, std::memory_order_release);
  waker.join();
}


absl::StatusOr<std::unique_ptr<PrometheusObserver>> PrometheusObserver::Create(
    const MetricsOptions& options) {
  std::unique_ptr<PrometheusObserver> obs(new PrometheusObserver());
  try {
    obs->BuildFamilies(options);
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("metrics: cannot create metric families: ", e.what()));
  }
  if (options.listen_address.empty()) return obs;
  try {
    // Each civetweb thread serves one connection at a time: enough of them
    // that idle connections do not hold up a scrape, and a timeout that
    // closes a connection which sends no request.
    // With TLS the exporter serves plain HTTP on loopback only, behind the
    // proxy that terminates TLS (metrics_tls.h).
    const bool tls = !options.tls_cert_file.empty();
    const std::string exporter_address = tls ? "127.0.0.1:0" : options.listen_address;
    std::vector<std::string> civet_options = {
        "listening_ports", exporter_address,
        "num_threads", std::to_string(kMetricsThreads),
        "request_timeout_ms", std::to_string(kMetricsRequestTimeoutMs)};
    obs->exposer_ = std::make_unique<prometheus::Exposer>(std::move(civet_options));
    obs->exposer_->RegisterCollectable(obs->registry_);
    obs->exposer_->RegisterCollectable(obs->process_);
    std::vector<int> ports = obs->exposer_->GetListeningPorts();
    obs->exporter_port_ = ports.empty() ? 0 : ports.front();
    obs->bound_port_ = obs->exporter_port_;
    obs->wake_host_ = WakeHost(exporter_address);
    if (tls) {
      MetricsTlsOptions proxy;
      proxy.listen_address = options.listen_address;
      proxy.upstream_port = obs->exporter_port_;
      proxy.cert_file = options.tls_cert_file;
      proxy.key_file = options.tls_key_file;
      proxy.client_ca_file = options.tls_client_ca_file;
      proxy.max_connections = kMetricsThreads;
      proxy.timeout_ms = kMetricsRequestTimeoutMs;
      absl::StatusOr<std::unique_ptr<MetricsTlsProxy>> made =
          MetricsTlsProxy::Create(std::move(proxy));
      if (!made.ok()) return made.status();
      obs->tls_proxy_ = std::move(*made);
      obs->bound_port_ = obs->tls_proxy_->bound_port();
    }
  } catch (const std::exception& e) {
    obs->exposer_.reset();
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics_listen: cannot listen on '", options.listen_address,
                     "' (address in use or malformed host:port): ", e.what()));
  }
  return obs;
}

void PrometheusObserver::AddKnownMethods() {
  for (const char* m : kKnownMethods) methods_.push_back(NewMethod(m));
}

template <typename T>
T* PrometheusObserver::Keep(std::unique_ptr<T> owned,
                            std::vector<std::unique_ptr<T>>* storage) {
  T* raw = owned.get();
  absl::MutexLock lock(&storage_mu_);
  storage->push_back(std::move(owned));
  return raw;
}

std::unique_ptr<PrometheusObserver::MethodSeries> PrometheusObserver::NewMethod(
    const std::string& name) {
  auto m = std::make_unique<MethodSeries>();
  m->name = name;
  const prometheus::Labels labels = {{"method", name}};
  m->latency = &request_seconds_->Add(labels, DurationBuckets());
  m->in_flight = &in_flight_->Add(labels);
  m->received_bytes = &received_bytes_->Add(labels);
  m->sent_bytes = &sent_bytes_->Add(labels);
  for (absl::StatusCode code : kCommonCodes) {
    const int c = static_cast<int>(code);
    m->requests.Get(c, [&] {
      return &requests_total_->Add(
          {{"method", name}, {"code", absl::StatusCodeToString(code)}});
    });
  }
  return m;
}

PrometheusObserver::MethodSeries* PrometheusObserver::Method(
    const char* method) {
  if (method == nullptr) method = "unknown";
  for (size_t i = 0; i < methods_.size(); ++i) {
    if (std::strcmp(kKnownMethods[i], method) == 0) return methods_[i].get();
  }
  const std::string name(method);
  return extra_methods_.Get(name, [&] {
    return Keep(NewMethod(name), &extra_method_storage_);
  });
}

std::unique_ptr<PrometheusObserver::FamilySeries> PrometheusObserver::NewFamily(
    const std::string& family) {
  auto f = std::make_unique<FamilySeries>();
  const prometheus::Labels labels = {{"family", family}};
  f->queue_depth = &queue_depth_->Add(labels);
  f->queue_seconds = &queue_seconds_->Add(labels, DurationBuckets());
  f->pack_seconds = &pack_seconds_->Add(labels, DurationBuckets());
  f->compute_seconds = &compute_seconds_->Add(labels, DurationBuckets());
  f->h2d_seconds = &copy_seconds_->Add(
      {{"family", family}, {"direction", "h2d"}}, DurationBuckets());
  f->d2h_seconds = &copy_seconds_->Add(
      {{"family", family}, {"direction", "d2h"}}, DurationBuckets());
  f->h2d_bytes = &copy_bytes_->Add({{"family", family}, {"direction", "h2d"}});
  f->d2h_bytes = &copy_bytes_->Add({{"family", family}, {"direction", "d2h"}});
  f->batch_requests = &batch_requests_->Add(labels, CountBuckets());
  f->batch_sequences = &batch_sequences_->Add(labels, CountBuckets());
  f->batch_bytes = &batch_bytes_->Add(labels, ByteBuckets());
  f->launches = &launches_->Add(labels);
  return f;
}

PrometheusObserver::FamilySeries* PrometheusObserver::Family(
    const BatchKey& key) {
  const size_t op = static_cast<size_t>(key.op);
  const size_t dt = static_cast<size_t>(key.x_dtype);
  if (op >= static_cast<size_t>(kNumOps) || dt >= static_cast<size_t>(kNumDTypes)) {
    return FamilyByName(key.Family());
  }
  const size_t index = op * kNumDTypes + dt;
  return families_.Get(index, [&] {
    return Keep(NewFamily(FamilyName(index)), &family_storage_);
  });
}

PrometheusObserver::FamilySeries* PrometheusObserver::FamilyByName(
    const std::string& family) {
  // The scheduler names families by BatchKey::Family(); map the known ones
  // onto the same slots OnTaskDequeued/OnBatchDone use.
  for (size_t i = 0; i < kNumFamilies; ++i) {
    const size_t op = i / kNumDTypes, dt = i % kNumDTypes;
    const char* op_name = OpName(kOps[op]);
    const size_t n = std::strlen(op_name);
    if (family.size() > n && family.compare(0, n, op_name) == 0 &&
        family[n] == '/' && family.compare(n + 1, std::string::npos,
                                           DTypeName(kDTypes[dt])) == 0) {
      return families_.Get(i, [&] {
        return Keep(NewFamily(FamilyName(i)), &family_storage_);
      });
    }
  }
  return extra_families_.Get(family, [&] {
    return Keep(NewFamily(family), &family_storage_);
  });
}

prometheus::Gauge* PrometheusObserver::Pool(const char* pool, int device) {
  if (pool == nullptr) pool = "unknown";
  for (size_t p = 0; p < kNumPools; ++p) {
    if (std::strcmp(kPools[p], pool) != 0) continue;
    if (device < 0 || static_cast<size_t>(device) >= kFastDevices) break;
    return pools_.Get(p * kFastDevices + device, [&] {
      return &pool_bytes_->Add(
          {{"pool", kPools[p]}, {"device", absl::StrCat(device)}});
    });
  }
  return extra_pools_.Get(absl::StrCat(pool, "/", device), [&] {
    return &pool_bytes_->Add({{"pool", pool}, {"device", absl::StrCat(device)}});
  });
}

void PrometheusObserver::SetBuildInfo(const std::string& backend,
                                      const std::vector<std::string>& devices) {
  absl::MutexLock lock(&build_info_mu_);
  if (build_info_ != nullptr) build_info_family_->Remove(build_info_);
  build_info_ = &build_info_family_->Add({{"version", version_},
                                          {"git_sha", git_sha_},
                                          {"backend", backend},
                                          {"devices", absl::StrJoin(devices, ",")}});
  build_info_->Set(1);
}

std::string PrometheusObserver::Render() const {
  std::vector<prometheus::MetricFamily> families = registry_->Collect();
  std::vector<prometheus::MetricFamily> process = process_->Collect();
  families.insert(families.end(), process.begin(), process.end());
  return prometheus::TextSerializer().Serialize(families);
}

void PrometheusObserver::OnRequestStart(const char* method) {
  Method(method)->in_flight->Increment();
}

void PrometheusObserver::OnRequestDone(const char* method,
                                       absl::StatusCode code,
                                       absl::Duration latency,
                                       int64_t bytes_received,
                                       int64_t bytes_sent) {
  MethodSeries* m = Method(method);
  int c = static_cast<int>(code);
  if (c < 0 || c >= kNumCodes) {
    c = static_cast<int>(absl::StatusCode::kUnknown);
    code = absl::StatusCode::kUnknown;
  }
  m->requests
      .Get(c,
           [&] {
             return &requests_total_->Add(
                 {{"method", m->name}, {"code", absl::StatusCodeToString(code)}});
           })
      ->Increment();
  m->latency->Observe(Seconds(latency));
  m->in_flight->Decrement();
  if (bytes_received > 0) m->received_bytes->Increment(bytes_received);
  if (bytes_sent > 0) m->sent_bytes->Increment(bytes_sent);
}

void PrometheusObserver::OnRejected(RejectReason reason) {
  const size_t r = static_cast<size_t>(reason);
  if (r < rejections_.size()) rejections_[r]->Increment();
}

void PrometheusObserver::OnQueueDepth(const std::string& family,
                                      int64_t depth) {
  FamilyByName(family)->queue_depth->Set(static_cast<double>(depth));
}

void PrometheusObserver::OnTaskDequeued(const BatchKey& key,
                                        absl::Duration queue_time) {
  Family(key)->queue_seconds->Observe(Seconds(queue_time));
}

void PrometheusObserver::OnBatchDone(int lane, const BatchKey& key,
                                     int32_t requests, int64_t sequences,
                                     int64_t bytes, const BatchStats& stats,
                                     absl::Duration busy) {
  FamilySeries* f = Family(key);
  f->batch_requests->Observe(requests);
  f->batch_sequences->Observe(static_cast<double>(sequences));
  f->batch_bytes->Observe(static_cast<double>(bytes));
  f->compute_seconds->Observe(stats.compute_seconds);
  // Backends without a stage (the cpu backend copies nothing, echo packs
  // nothing) leave it at zero; observing those zeros would drag the stage's
  // quantiles down to the first bucket.
  if (stats.pack_seconds > 0) f->pack_seconds->Observe(stats.pack_seconds);
  if (stats.h2d_seconds > 0 || stats.h2d_bytes > 0) {
    f->h2d_seconds->Observe(stats.h2d_seconds);
  }
  if (stats.d2h_seconds > 0 || stats.d2h_bytes > 0) {
    f->d2h_seconds->Observe(stats.d2h_seconds);
  }
  if (stats.h2d_bytes > 0) f->h2d_bytes->Increment(stats.h2d_bytes);
  if (stats.d2h_bytes > 0) f->d2h_bytes->Increment(stats.d2h_bytes);
  if (stats.launches > 0) f->launches->Increment(stats.launches);

  prometheus::Counter* lane_busy;
  if (lane >= 0 && static_cast<size_t>(lane) < kFastLanes) {
    lane_busy = lanes_.Get(lane, [&] {
      return &lane_busy_->Add({{"lane", absl::StrCat(lane)}});
    });
  } else {
    const std::string name = absl::StrCat(lane);
    lane_busy = extra_lanes_.Get(
        name, [&] { return &lane_busy_->Add({{"lane", name}}); });
  }
  const double busy_seconds = Seconds(busy);
  if (busy_seconds > 0) lane_busy->Increment(busy_seconds);
}

void PrometheusObserver::OnWeightsChanged(int64_t sets, int64_t bytes) {
  weight_sets_->Set(static_cast<double>(sets));
  weight_bytes_->Set(static_cast<double>(bytes));
}

void PrometheusObserver::OnPoolBytes(const char* pool, int device,
                                     int64_t bytes) {
  Pool(pool, device)->Set(static_cast<double>(bytes));
}

void PrometheusObserver::OnDeviceError(int device,
                                       const std::string& message) {
  const std::string name = absl::StrCat(device);
  auto make = [&] { return &device_errors_->Add({{"device", name}}); };
  if (device >= 0 && static_cast<size_t>(device) < kFastDevices) {
    device_errors_by_index_.Get(device, make)->Increment();
  } else {
    extra_device_errors_.Get(name, make)->Increment();
  }
}

void PrometheusObserver::OnHostPoolMiss(int64_t /*bytes*/) {
  host_pool_misses_->Increment();
}

void PrometheusObserver::OnServingChanged(bool serving) {
  serving_->Set(serving ? 1 : 0);
}

}  // namespace conv1d
