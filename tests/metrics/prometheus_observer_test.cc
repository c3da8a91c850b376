// Unit tests of PrometheusObserver: every hook is driven with random values
// and the rendered exposition is checked against counts and sums computed
// here independently, then linted with promtool.
#include "server/metrics/prometheus_observer.h"

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/common/test_seed.h"
#include "tests/metrics/exposition.h"

namespace conv1d {
namespace {

using testing::Exposition;
using Labels = std::map<std::string, std::string>;

std::unique_ptr<PrometheusObserver> MakeObserver() {
  MetricsOptions options;
  options.listen_address = "";  // render only
  options.version = "9.8.7";
  options.git_sha = "abc123def456";
  options.backend = "cpu";
  options.devices = {"cpu0", "cpu1"};
  auto obs = PrometheusObserver::Create(options);
  EXPECT_TRUE(obs.ok()) << obs.status();
  return std::move(obs).value();
}

// Checks _count, _sum and every cumulative bucket of one histogram series
// against the observed values.
void ExpectHistogram(const Exposition& e, const std::string& name,
                     const Labels& labels, const std::vector<double>& values) {
  SCOPED_TRACE(name);
  ASSERT_EQ(e.Value(name + "_count", labels), static_cast<double>(values.size()));
  double sum = 0;
  for (double v : values) sum += v;
  auto got_sum = e.Value(name + "_sum", labels);
  ASSERT_TRUE(got_sum.has_value());
  EXPECT_NEAR(*got_sum, sum, 1e-9 * std::max(1.0, std::abs(sum)));
  const std::vector<double> bounds = e.Bounds(name, labels);
  ASSERT_GE(bounds.size(), 2u);
  EXPECT_TRUE(std::isinf(bounds.back()));
  for (double le : bounds) {
    const double want = std::count_if(values.begin(), values.end(),
                                      [&](double v) { return v <= le; });
    EXPECT_EQ(e.Bucket(name, labels, le), want) << "le=" << le;
  }
}

class ObserverTest : public ::testing::Test {
 protected:
  ObserverTest() : seed_(42), rng_(seed_.seed()) {}
  double Uniform(double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(rng_);
  }
  int64_t Int(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }
  // Log-uniform over the bucket range, so every bucket gets exercised.
  double Seconds() { return std::pow(10.0, Uniform(-5.5, 1.3)); }
  conv1d::testing::SeedScope seed_;
  std::mt19937_64 rng_;
};

TEST_F(ObserverTest, BucketLayouts) {
  const auto d = PrometheusObserver::DurationBuckets();
  EXPECT_DOUBLE_EQ(d.front(), 1e-5);
  EXPECT_DOUBLE_EQ(d.back(), 10.0);
  EXPECT_TRUE(std::is_sorted(d.begin(), d.end()));
  EXPECT_EQ(PrometheusObserver::CountBuckets().front(), 1.0);
  EXPECT_EQ(PrometheusObserver::ByteBuckets().front(), 1024.0);
  EXPECT_EQ(PrometheusObserver::ByteBuckets().back(), 4.0 * (1LL << 30));
}

TEST_F(ObserverTest, RequestsByMethodAndCode) {
  auto obs = MakeObserver();
  const std::vector<std::string> methods = {"Forward", "Backward", "Update",
                                            "ListWeights", "Check"};
  const std::vector<absl::StatusCode> codes = {
      absl::StatusCode::kOk, absl::StatusCode::kInvalidArgument,
      absl::StatusCode::kResourceExhausted, absl::StatusCode::kDataLoss};
  std::map<std::pair<std::string, std::string>, int> want_count;
  std::map<std::string, std::vector<double>> latencies;
  std::map<std::string, double> rx, tx;
  std::map<std::string, int> open;
  for (int i = 0; i < 400; ++i) {
    const std::string& m = methods[Int(0, methods.size() - 1)];
    obs->OnRequestStart(m.c_str());
    ++open[m];
    if (Int(0, 4) == 0) continue;  // still in flight
    const absl::StatusCode code = codes[Int(0, codes.size() - 1)];
    const double s = Seconds();
    const int64_t in = Int(1, 1 << 24), out = Int(1, 1 << 24);
    obs->OnRequestDone(m.c_str(), code, absl::Seconds(s), in, out);
    --open[m];
    ++want_count[{m, absl::StatusCodeToString(code)}];
    latencies[m].push_back(s);
    rx[m] += in;
    tx[m] += out;
  }
  // A code outside absl's range is reported as UNKNOWN, not dropped.
  obs->OnRequestStart("Forward");
  obs->OnRequestDone("Forward", static_cast<absl::StatusCode>(99),
                     absl::Milliseconds(3), 0, 0);
  ++want_count[{"Forward", "UNKNOWN"}];
  latencies["Forward"].push_back(0.003);

  const Exposition e = Exposition::Parse(obs->Render());
  EXPECT_EQ(e.types().at("conv1d_requests_total"), "counter");
  EXPECT_EQ(e.types().at("conv1d_request_duration_seconds"), "histogram");
  for (const auto& [key, n] : want_count) {
    EXPECT_EQ(e.Value("conv1d_requests_total",
                      {{"method", key.first}, {"code", key.second}}),
              n)
        << key.first << " " << key.second;
  }
  // Common codes exist from the start, at zero, for every known method.
  if (!want_count.count({"ServerInfo", "DEADLINE_EXCEEDED"})) {
    EXPECT_EQ(e.Value("conv1d_requests_total",
                      {{"method", "ServerInfo"}, {"code", "DEADLINE_EXCEEDED"}}),
              0);
  }
  for (const std::string& m : methods) {
    SCOPED_TRACE(m);
    const Labels l = {{"method", m}};
    ExpectHistogram(e, "conv1d_request_duration_seconds", l, latencies[m]);
    EXPECT_EQ(e.Value("conv1d_requests_in_flight", l), open[m]);
    EXPECT_EQ(e.Value("conv1d_received_bytes_total", l), rx[m]);
    EXPECT_EQ(e.Value("conv1d_sent_bytes_total", l), tx[m]);
  }
}

TEST_F(ObserverTest, RejectionsServingWeightsPoolsErrorsBuildInfo) {
  auto obs = MakeObserver();
  std::map<std::string, int> rejected;
  for (int i = 0; i < 200; ++i) {
    const auto r = static_cast<RejectReason>(Int(0, 5));
    obs->OnRejected(r);
    ++rejected[RejectReasonName(r)];
  }
  const int64_t sets = Int(1, 100), wbytes = Int(1, 1LL << 40);
  obs->OnWeightsChanged(Int(1, 100), Int(1, 1000));
  obs->OnWeightsChanged(sets, wbytes);
  const int64_t reserved = Int(1, 1LL << 36), in_use = Int(1, 1LL << 30),
                pinned = Int(1, 1LL << 30);
  obs->OnPoolBytes("device_reserved", 1, reserved);
  obs->OnPoolBytes("device_in_use", 1, Int(1, 1000));
  obs->OnPoolBytes("device_in_use", 1, in_use);
  obs->OnPoolBytes("pinned", 0, pinned);
  const int64_t host_in_use = Int(1, 1LL << 32);
  obs->OnPoolBytes("host_in_use", 0, host_in_use);
  const int misses = Int(1, 9);
  for (int i = 0; i < misses; ++i) obs->OnHostPoolMiss(Int(1, 1 << 26));
  obs->OnPoolBytes("scratch", 200, 77);  // outside the fast tables
  const int errors = Int(1, 5);
  for (int i = 0; i < errors; ++i) obs->OnDeviceError(3, "ECC error");
  obs->OnDeviceError(1000, "lost");

  Exposition e = Exposition::Parse(obs->Render());
  EXPECT_EQ(e.Value("conv1d_health_serving"), 0);
  obs->OnServingChanged(true);
  EXPECT_EQ(Exposition::Parse(obs->Render()).Value("conv1d_health_serving"), 1);
  obs->OnServingChanged(false);
  EXPECT_EQ(Exposition::Parse(obs->Render()).Value("conv1d_health_serving"), 0);

  for (const char* reason : {"invalid", "queue_full", "deadline", "cancelled",
                             "too_large", "draining"}) {
    EXPECT_EQ(e.Value("conv1d_rejections_total", {{"reason", reason}}),
              rejected[reason])
        << reason;
  }
  EXPECT_EQ(e.Value("conv1d_weight_sets"), sets);
  EXPECT_EQ(e.Value("conv1d_weight_bytes"), static_cast<double>(wbytes));
  EXPECT_EQ(e.Value("conv1d_pool_bytes", {{"pool", "device_reserved"}, {"device", "1"}}),
            static_cast<double>(reserved));
  EXPECT_EQ(e.Value("conv1d_pool_bytes", {{"pool", "device_in_use"}, {"device", "1"}}),
            static_cast<double>(in_use));
  EXPECT_EQ(e.Value("conv1d_pool_bytes", {{"pool", "pinned"}, {"device", "0"}}),
            static_cast<double>(pinned));
  EXPECT_EQ(e.Value("conv1d_pool_bytes", {{"pool", "host_in_use"}, {"device", "0"}}),
            static_cast<double>(host_in_use));
  EXPECT_EQ(e.Value("conv1d_host_pool_misses_total"), misses);
  EXPECT_EQ(e.Value("conv1d_pool_bytes", {{"pool", "scratch"}, {"device", "200"}}), 77);
  EXPECT_EQ(e.Value("conv1d_device_errors_total", {{"device", "3"}}), errors);
  EXPECT_EQ(e.Value("conv1d_device_errors_total", {{"device", "1000"}}), 1);
  EXPECT_EQ(e.Value("conv1d_build_info", {{"version", "9.8.7"},
                                          {"git_sha", "abc123def456"},
                                          {"backend", "cpu"},
                                          {"devices", "cpu0,cpu1"}}),
            1);
  auto start = e.Value("conv1d_start_time_seconds");
  ASSERT_TRUE(start.has_value());
  EXPECT_NEAR(*start, absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()), 60);
}

TEST_F(ObserverTest, Sessions) {
  auto obs = MakeObserver();
  std::map<std::string, int> events;
  int64_t open = 0, bytes = 0;
  for (int i = 0; i < 100; ++i) {
    const auto ev = static_cast<SessionEvent>(Int(0, 3));
    open = Int(0, 1000);
    bytes = Int(0, 1LL << 34);
    obs->OnSessionEvent(ev, open, bytes);
    ++events[SessionEventName(ev)];
  }
  std::vector<double> steps_seconds, per_launch;
  for (int i = 0; i < 300; ++i) {
    steps_seconds.push_back(Seconds());
    obs->OnSessionStep(absl::Seconds(steps_seconds.back()));
  }
  for (int i = 0; i < 50; ++i) {
    per_launch.push_back(static_cast<double>(Int(1, 20000)));
    obs->OnSessionStepsPerLaunch(static_cast<int32_t>(per_launch.back()));
  }
  const Exposition e = Exposition::Parse(obs->Render());
  for (const char* ev : {"opened", "closed", "expired", "failed"}) {
    EXPECT_EQ(e.Value("conv1d_sessions_total", {{"event", ev}}), events[ev]) << ev;
  }
  EXPECT_EQ(e.Value("conv1d_sessions_open"), static_cast<double>(open));
  EXPECT_EQ(e.Value("conv1d_session_slot_bytes"), static_cast<double>(bytes));
  ExpectHistogram(e, "conv1d_session_step_duration_seconds", {}, steps_seconds);
  ExpectHistogram(e, "conv1d_session_steps_per_launch", {}, per_launch);
  for (const char* method : {"Decode", "OpenSession", "CloseSession"}) {
    EXPECT_EQ(e.Value("conv1d_requests_total", {{"method", method}, {"code", "OK"}}), 0)
        << method;
  }
}

TEST_F(ObserverTest, SetBuildInfoReplacesTheSeries) {
  auto obs = MakeObserver();
  obs->SetBuildInfo("gpu", {"NVIDIA H200", "NVIDIA H200"});
  const Exposition e = Exposition::Parse(obs->Render());
  int series = 0;
  for (const auto& s : e.series()) series += s.name == "conv1d_build_info";
  EXPECT_EQ(series, 1);
  EXPECT_EQ(e.Value("conv1d_build_info", {{"version", "9.8.7"},
                                          {"git_sha", "abc123def456"},
                                          {"backend", "gpu"},
                                          {"devices", "NVIDIA H200,NVIDIA H200"}}),
            1);
}

TEST_F(ObserverTest, SchedulerAndBatches) {
  auto obs = MakeObserver();
  BatchKey fwd;
  fwd.op = Op::kForward;
  fwd.x_dtype = DType::kBF16;
  fwd.dim = 2048;
  fwd.width = 4;
  BatchKey bwd = fwd;
  bwd.op = Op::kBackward;
  bwd.x_dtype = DType::kF32;
  const std::string ff = fwd.Family(), bf = bwd.Family();
  ASSERT_NE(ff, bf);

  // Queue depth: last value wins; the scheduler's family strings and the
  // batch keys land on the same series.
  obs->OnQueueDepth(ff, Int(10, 100));
  const int64_t depth = Int(1, 1000);
  obs->OnQueueDepth(ff, depth);
  obs->OnQueueDepth("custom/fp8", 5);

  std::map<std::string, std::vector<double>> queue, compute, pack, h2d, d2h,
      reqs, seqs, bytes;
  std::map<std::string, double> h2d_bytes, d2h_bytes, launches;
  std::map<int, double> busy;
  for (int i = 0; i < 300; ++i) {
    const BatchKey& k = Int(0, 1) ? fwd : bwd;
    const std::string f = k.Family();
    const double q = Seconds();
    obs->OnTaskDequeued(k, absl::Seconds(q));
    queue[f].push_back(q);
    if (i % 3 != 0) continue;
    const int lane = Int(0, 3);
    BatchStats st;
    st.compute_seconds = Seconds();
    const bool gpu = (k.op == Op::kForward);  // bwd batches look like cpu ones
    if (gpu) {
      st.pack_seconds = Seconds();
      st.h2d_seconds = Seconds();
      st.d2h_seconds = Seconds();
      st.h2d_bytes = Int(1, 1LL << 30);
      st.d2h_bytes = Int(1, 1LL << 30);
      pack[f].push_back(st.pack_seconds);
      h2d[f].push_back(st.h2d_seconds);
      d2h[f].push_back(st.d2h_seconds);
      h2d_bytes[f] += st.h2d_bytes;
      d2h_bytes[f] += st.d2h_bytes;
    }
    st.launches = Int(1, 3);
    const int32_t r = Int(1, 300);
    const int64_t s = Int(r, 5000), b = Int(1, 1LL << 33);
    const double u = Seconds();
    obs->OnBatchDone(lane, k, r, s, b, st, absl::Seconds(u));
    compute[f].push_back(st.compute_seconds);
    reqs[f].push_back(r);
    seqs[f].push_back(s);
    bytes[f].push_back(b);
    launches[f] += st.launches;
    busy[lane] += u;
  }
  obs->OnBatchDone(700, fwd, 1, 1, 1, BatchStats{}, absl::Seconds(2));

  const Exposition e = Exposition::Parse(obs->Render());
  EXPECT_EQ(e.Value("conv1d_queue_depth", {{"family", ff}}), depth);
  EXPECT_EQ(e.Value("conv1d_queue_depth", {{"family", "custom/fp8"}}), 5);
  for (const std::string& f : {ff, bf}) {
    SCOPED_TRACE(f);
    const Labels l = {{"family", f}};
    ExpectHistogram(e, "conv1d_request_queue_seconds", l, queue[f]);
    std::vector<double> c = compute[f];
    if (f == ff) c.push_back(0);  // the lane-700 batch
    ExpectHistogram(e, "conv1d_compute_seconds", l, c);
    ExpectHistogram(e, "conv1d_pack_seconds", l, pack[f]);
    ExpectHistogram(e, "conv1d_copy_seconds", {{"family", f}, {"direction", "h2d"}}, h2d[f]);
    ExpectHistogram(e, "conv1d_copy_seconds", {{"family", f}, {"direction", "d2h"}}, d2h[f]);
    std::vector<double> r = reqs[f], s = seqs[f], b = bytes[f];
    if (f == ff) r.push_back(1), s.push_back(1), b.push_back(1);
    ExpectHistogram(e, "conv1d_batch_requests", l, r);
    ExpectHistogram(e, "conv1d_batch_sequences", l, s);
    ExpectHistogram(e, "conv1d_batch_bytes", l, b);
    EXPECT_EQ(e.Value("conv1d_copy_bytes_total", {{"family", f}, {"direction", "h2d"}}),
              h2d_bytes[f]);
    EXPECT_EQ(e.Value("conv1d_copy_bytes_total", {{"family", f}, {"direction", "d2h"}}),
              d2h_bytes[f]);
    EXPECT_EQ(e.Value("conv1d_kernel_launches_total", l), launches[f]);
  }
  for (const auto& [lane, seconds] : busy) {
    auto got = e.Value("conv1d_lane_busy_seconds_total", {{"lane", absl::StrCat(lane)}});
    ASSERT_TRUE(got.has_value()) << lane;
    EXPECT_NEAR(*got, seconds, 1e-9 * seconds);
  }
  EXPECT_EQ(e.Value("conv1d_lane_busy_seconds_total", {{"lane", "700"}}), 2);
}

TEST_F(ObserverTest, ConcurrentHooksLoseNothing) {
  auto obs = MakeObserver();
  constexpr int kThreads = 8, kPerThread = 20000;
  BatchKey key;
  key.op = Op::kUpdate;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const std::string family = key.Family();
      for (int i = 0; i < kPerThread; ++i) {
        obs->OnRequestStart("Update");
        obs->OnTaskDequeued(key, absl::Microseconds(50));
        obs->OnBatchDone(t, key, 1, 1, 100, BatchStats{}, absl::Microseconds(1));
        obs->OnQueueDepth(family, i);
        obs->OnRequestDone("Update", absl::StatusCode::kOk, absl::Microseconds(100), 1, 2);
        obs->OnRequestDone(i % 2 ? "Odd" : "Even", absl::StatusCode::kOk,
                           absl::Microseconds(100), 1, 2);
      }
    });
  }
  std::string mid = obs->Render();  // scrapes may race with the hooks
  for (auto& th : threads) th.join();
  EXPECT_FALSE(mid.empty());
  const Exposition e = Exposition::Parse(obs->Render());
  const double n = kThreads * kPerThread;
  EXPECT_EQ(e.Value("conv1d_requests_total", {{"method", "Update"}, {"code", "OK"}}), n);
  EXPECT_EQ(e.Value("conv1d_requests_total", {{"method", "Odd"}, {"code", "OK"}}), n / 2);
  EXPECT_EQ(e.Value("conv1d_requests_in_flight", {{"method", "Update"}}), 0);
  EXPECT_EQ(e.Value("conv1d_sent_bytes_total", {{"method", "Update"}}), 2 * n);
  EXPECT_EQ(e.Value("conv1d_request_queue_seconds_count", {{"family", key.Family()}}), n);
  EXPECT_EQ(e.Value("conv1d_batch_bytes_sum", {{"family", key.Family()}}), 100 * n);
}

}  // namespace
}  // namespace conv1d
