// Live metrics test: a real conv1d_server (cpu backend) scraped every second
// by a real Prometheus; a known load is sent through the generated gRPC
// stub, then Prometheus' HTTP API must report exactly that load, its latency
// quantile must agree with what the client saw, the server's /metrics must
// pass promtool, and every dashboard query must evaluate.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <limits>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "conv1d/v1/conv1d.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/common/test_seed.h"
#include "tests/metrics/child_process.h"
#include "tests/metrics/exposition.h"

namespace conv1d {
namespace {

using testing::ChildProcess;
using testing::Exposition;
using testing::HttpBody200;
using testing::HttpGet;
using testing::UrlEncode;

// Ports differ from run to run (tests may run side by side); tensor values
// come from the test's seed.
int RandomPort() {
  static std::mt19937_64 rng(std::random_device{}());
  return std::uniform_int_distribution<int>(20000, 60000)(rng);
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

template <typename Pred>
bool WaitFor(Pred pred, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int>(seconds * 1000));
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return pred();
}

// One instant query; returns the values of all result series (empty when
// the query returned nothing) and sets *ok to whether it evaluated.
std::vector<double> Query(int port, const std::string& promql, bool* ok = nullptr,
                          std::string* raw = nullptr) {
  const std::string body =
      HttpBody200(HttpGet(port, "/api/v1/query?query=" + UrlEncode(promql)));
  if (raw) *raw = body;
  if (ok) *ok = body.find("\"status\":\"success\"") != std::string::npos;
  std::vector<double> values;
  static const std::regex value_re(R"re("value":\[[0-9.e+]+,"([^"]+)"\])re");
  for (auto it = std::sregex_iterator(body.begin(), body.end(), value_re);
       it != std::sregex_iterator(); ++it) {
    values.push_back(std::strtod((*it)[1].str().c_str(), nullptr));
  }
  return values;
}

double QueryOne(int port, const std::string& promql) {
  std::vector<double> v = Query(port, promql);
  return v.size() == 1 ? v[0] : std::numeric_limits<double>::quiet_NaN();
}

// histogram_quantile's estimate over cumulative buckets (bound, count).
double Quantile(double q, const std::vector<std::pair<double, double>>& buckets) {
  const double total = buckets.back().second;
  const double rank = q * total;
  double lower = 0, below = 0;
  for (const auto& [bound, count] : buckets) {
    if (count >= rank) {
      if (std::isinf(bound)) return lower;
      return lower + (bound - lower) * (rank - below) / (count - below);
    }
    lower = bound;
    below = count;
  }
  return lower;
}

// Index of the first bucket bound >= v.
int BucketIndex(const std::vector<double>& bounds, double v) {
  return static_cast<int>(std::lower_bound(bounds.begin(), bounds.end(), v) -
                          bounds.begin());
}

v1::Tensor RandomTensor(std::vector<int64_t> shape, std::mt19937_64& rng) {
  v1::Tensor t;
  t.set_dtype(v1::FP32);
  int64_t n = 1;
  for (int64_t d : shape) {
    t.add_shape(d);
    n *= d;
  }
  std::vector<float> v(n);
  std::uniform_real_distribution<float> u(-1, 1);
  for (float& x : v) x = u(rng);
  t.set_data(v.data(), v.size() * sizeof(float));
  return t;
}

class LiveMetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/conv1d_live_metrics_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    prometheus_.reset();
    server_.reset();
    if (HasFailure()) {
      std::printf("--- server log ---\n%s\n--- prometheus log (tail) ---\n%s\n",
                  ReadFile(dir_ + "/server.log").c_str(),
                  Tail(ReadFile(dir_ + "/prometheus.log")).c_str());
    } else {
      std::system(("rm -rf '" + dir_ + "'").c_str());
    }
  }
  static std::string Tail(const std::string& s) {
    return s.size() > 4000 ? s.substr(s.size() - 4000) : s;
  }

  // Starts the server on random free ports, retrying on a port clash.
  void StartServer() {
    for (int attempt = 0; attempt < 8 && !server_; ++attempt) {
      grpc_port_ = RandomPort();
      metrics_port_ = RandomPort();
      if (grpc_port_ == metrics_port_) continue;
      auto child = ChildProcess::Start(
          {CONV1D_SERVER_BIN, absl::StrCat("--listen=127.0.0.1:", grpc_port_),
           absl::StrCat("--metrics_listen=127.0.0.1:", metrics_port_),
           "--backend=cpu", "--threads=1", "--drain_timeout_s=5"},
          dir_ + "/server.log");
      ASSERT_NE(child, nullptr);
      const bool up = WaitFor(
          [&] {
            return !child->Running() ||
                   HttpBody200(HttpGet(metrics_port_, "/metrics"))
                           .find("conv1d_build_info") != std::string::npos;
          },
          30);
      if (up && child->Running()) server_ = std::move(child);
    }
    ASSERT_NE(server_, nullptr) << "conv1d_server did not start";
  }

  void StartPrometheus() {
    const std::string config = dir_ + "/prometheus.yml";
    std::ofstream(config) << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                          << "scrape_configs:\n  - job_name: conv1d\n"
                          << "    static_configs:\n      - targets: ['127.0.0.1:"
                          << metrics_port_ << "']\n";
    for (int attempt = 0; attempt < 8 && !prometheus_; ++attempt) {
      prom_port_ = RandomPort();
      if (prom_port_ == grpc_port_ || prom_port_ == metrics_port_) continue;
      auto child = ChildProcess::Start(
          {CONV1D_PROMETHEUS_BIN, "--config.file=" + config,
           "--storage.tsdb.path=" + dir_ + "/tsdb",
           absl::StrCat("--web.listen-address=127.0.0.1:", prom_port_),
           "--log.level=warn"},
          dir_ + "/prometheus.log");
      ASSERT_NE(child, nullptr);
      const bool up = WaitFor(
          [&] {
            return !child->Running() ||
                   !HttpBody200(HttpGet(prom_port_, "/-/ready")).empty();
          },
          30);
      if (up && child->Running()) prometheus_ = std::move(child);
    }
    ASSERT_NE(prometheus_, nullptr) << "prometheus did not start";
  }

  std::string dir_;
  int grpc_port_ = 0, metrics_port_ = 0, prom_port_ = 0;
  std::unique_ptr<ChildProcess> server_, prometheus_;
};

TEST_F(LiveMetricsTest, PrometheusSeesTheLoadTheClientSent) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  ASSERT_NO_FATAL_FAILURE(StartPrometheus());

  // Load starts after Prometheus has a first sample, so rate() over the
  // dashboard's windows sees the load as an increase.
  ASSERT_TRUE(WaitFor([&] { return QueryOne(prom_port_, R"(up{job="conv1d"})") == 1; }, 30));

  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", grpc_port_),
                                     grpc::InsecureChannelCredentials());
  ASSERT_TRUE(channel->WaitForConnected(std::chrono::system_clock::now() +
                                        std::chrono::seconds(10)));
  auto stub = v1::Conv1d::NewStub(channel);

  CONV1D_TEST_SEED_SCOPE(test_seed, 42);
  std::mt19937_64 rng(test_seed);
  constexpr int kOk = 30, kInvalid = 4;
  constexpr int64_t B = 2, D = 256, L = 512, W = 4;
  std::vector<double> latencies;
  for (int i = 0; i < kOk + kInvalid; ++i) {
    v1::ForwardRequest req;
    const bool valid = i % 8 != 7;  // i = 7, 15, 23, 31: kInvalid of them
    *req.mutable_x() = RandomTensor({B, D, L}, rng);
    if (!valid) req.mutable_x()->set_data("short");
    req.set_activation(v1::ACTIVATION_SILU);
    *req.mutable_inline_weights()->mutable_weight() = RandomTensor({D, W}, rng);
    *req.mutable_inline_weights()->mutable_bias() = RandomTensor({D}, rng);
    v1::ForwardResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    const auto t0 = std::chrono::steady_clock::now();
    const grpc::Status st = stub->Forward(&ctx, req, &resp);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    latencies.push_back(s);
    if (valid) {
      ASSERT_TRUE(st.ok()) << st.error_message();
      EXPECT_EQ(resp.y().data().size(), static_cast<size_t>(B * D * L * 4));
    } else {
      ASSERT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    }
  }
  ASSERT_EQ(latencies.size(), static_cast<size_t>(kOk + kInvalid));
  const double client_min = *std::min_element(latencies.begin(), latencies.end());
  const double client_max = *std::max_element(latencies.begin(), latencies.end());

  // Scrapes every second: wait until Prometheus holds the whole load.
  const std::string ok_q = R"(sum(conv1d_requests_total{method="Forward",code="OK"}))";
  ASSERT_TRUE(WaitFor([&] { return QueryOne(prom_port_, ok_q) == kOk; }, 30))
      << "last value: " << QueryOne(prom_port_, ok_q);
  EXPECT_EQ(QueryOne(prom_port_,
                     R"(sum(conv1d_requests_total{method="Forward",code="INVALID_ARGUMENT"}))"),
            kInvalid);
  EXPECT_EQ(QueryOne(prom_port_, R"(sum(conv1d_requests_total{method="Forward"}))"),
            kOk + kInvalid);
  EXPECT_EQ(QueryOne(prom_port_, R"(sum(conv1d_requests_in_flight))"), 0);
  // Only valid requests reach the scheduler and the backend.
  EXPECT_EQ(QueryOne(prom_port_, R"(sum(conv1d_request_queue_seconds_count{family="forward/fp32"}))"),
            kOk);
  EXPECT_EQ(QueryOne(prom_port_, R"(sum(conv1d_batch_requests_sum{family="forward/fp32"}))"), kOk);
  EXPECT_GT(QueryOne(prom_port_, R"(sum(conv1d_compute_seconds_count))"), 0);
  EXPECT_EQ(QueryOne(prom_port_, R"(conv1d_health_serving)"), 1);
  EXPECT_EQ(QueryOne(prom_port_, R"(sum(conv1d_rejections_total{reason="invalid"}))"),
            kInvalid);
  EXPECT_GE(QueryOne(prom_port_, R"(sum(conv1d_received_bytes_total{method="Forward"}))"),
            kOk * B * D * L * 4.0);
  EXPECT_GE(QueryOne(prom_port_, R"(sum(conv1d_sent_bytes_total{method="Forward"}))"),
            kOk * B * D * L * 4.0);

  // The server's own histogram, read straight from /metrics.
  const std::string text = HttpBody200(HttpGet(metrics_port_, "/metrics"));
  ASSERT_FALSE(text.empty());
  const Exposition e = Exposition::Parse(text);
  const std::map<std::string, std::string> fwd = {{"method", "Forward"}};
  std::vector<std::pair<double, double>> buckets;
  std::vector<double> bounds = e.Bounds("conv1d_request_duration_seconds", fwd);
  for (double le : bounds) {
    buckets.emplace_back(le, *e.Bucket("conv1d_request_duration_seconds", fwd, le));
  }
  ASSERT_EQ(buckets.back().second, kOk + kInvalid);
  const double server_p50 = Quantile(0.5, buckets);

  const double prom_p50 = QueryOne(
      prom_port_,
      R"(histogram_quantile(0.5, sum by (le) (conv1d_request_duration_seconds_bucket{method="Forward"})))");
  // Prometheus and the exposition hold the same counts: same estimate.
  EXPECT_NEAR(prom_p50, server_p50, 1e-9 + 1e-6 * server_p50);
  // The server measures inside the client's round trip: the estimate lies
  // at or below the bucket holding the client's slowest call, and no more
  // than two buckets (a factor of ~5) below the one holding its fastest.
  const int idx = BucketIndex(bounds, prom_p50);
  EXPECT_LE(idx, BucketIndex(bounds, client_max))
      << "p50 " << prom_p50 << " client max " << client_max;
  EXPECT_GE(idx, BucketIndex(bounds, client_min) - 2)
      << "p50 " << prom_p50 << " client min " << client_min;
  std::printf("client latency min %.6f max %.6f s; server p50 %.6f s\n", client_min,
              client_max, prom_p50);

  // The live exposition is clean under promtool.
  std::string lint;
  EXPECT_EQ(testing::PromtoolCheckMetrics(CONV1D_PROMTOOL, text, &lint), 0) << lint;
  EXPECT_EQ(lint, "");

  // Every dashboard query evaluates against this Prometheus, and the core
  // request panels have data (once two samples lie in the rate window).
  ASSERT_TRUE(WaitFor(
      [&] { return !Query(prom_port_, "rate(conv1d_requests_total[1m])").empty(); }, 30));
  const std::string dash = ReadFile(std::string(CONV1D_SOURCE_DIR) +
                                    "/deploy/grafana/conv1d-dashboard.json");
  static const std::regex expr_re(R"re("expr": "((?:[^"\\]|\\.)*)")re");
  int exprs = 0;
  for (auto it = std::sregex_iterator(dash.begin(), dash.end(), expr_re);
       it != std::sregex_iterator(); ++it) {
    std::string q = (*it)[1].str();
    q = std::regex_replace(q, std::regex(R"(\\")"), "\"");
    q = std::regex_replace(q, std::regex(R"(\$instance|\$method)"), ".*");
    q = std::regex_replace(q, std::regex(R"(\$__rate_interval)"), "1m");
    bool ok = false;
    std::string raw;
    const std::vector<double> v = Query(prom_port_, q, &ok, &raw);
    EXPECT_TRUE(ok) << q << "\n" << raw;
    const bool core = q.find("rate(conv1d_requests_total") != std::string::npos ||
                      q.find("conv1d_request_duration_seconds_bucket") != std::string::npos;
    if (core) {
      EXPECT_FALSE(v.empty()) << "no data for " << q << "\n" << raw;
    }
    ++exprs;
  }
  EXPECT_GE(exprs, 20);

  // SIGTERM drains and exits 0.
  const int status = server_->Stop(15000);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
}

}  // namespace
}  // namespace conv1d
