// Tests of the metrics endpoint and its consumers: the HTTP listener (port
// 0, bind failures), `promtool check metrics` on a fully populated
// exposition, and that every conv1d_ metric the dashboard and alert rules
// query is one the server exports.

#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/metrics/prometheus_observer.h"
#include "tests/metrics/child_process.h"
#include "tests/metrics/exposition.h"

namespace conv1d {
namespace {

using testing::Exposition;
using testing::HttpGet;

// Every hook at least once, with values that fill several buckets.
void DriveAllHooks(PrometheusObserver* obs) {
  BatchKey key;
  key.op = Op::kBackward;
  key.x_dtype = DType::kF16;
  for (int i = 0; i < 20; ++i) {
    obs->OnRequestStart("Backward");
    obs->OnRequestDone("Backward", i % 5 ? absl::StatusCode::kOk
                                         : absl::StatusCode::kInvalidArgument,
                       absl::Microseconds(37 << (i % 16)), 1000 + i, 2000 + i);
    obs->OnTaskDequeued(key, absl::Microseconds(11 << (i % 18)));
    BatchStats st;
    st.pack_seconds = 1e-5 * (i + 1);
    st.h2d_seconds = 2e-5 * (i + 1);
    st.compute_seconds = 3e-4 * (i + 1);
    st.d2h_seconds = 4e-5 * (i + 1);
    st.h2d_bytes = 1 << (10 + i);
    st.d2h_bytes = 1 << (9 + i);
    st.launches = 1;
    obs->OnBatchDone(i % 2, key, 1 + i, 2 + 3 * i, 4096LL << i, st,
                     absl::Milliseconds(1 + i));
  }
  obs->OnRejected(RejectReason::kQueueFull);
  obs->OnRejected(RejectReason::kDraining);
  obs->OnQueueDepth(key.Family(), 12);
  obs->OnWeightsChanged(3, 3 << 20);
  obs->OnPoolBytes("device_reserved", 0, 1LL << 34);
  obs->OnPoolBytes("device_in_use", 0, 1LL << 30);
  obs->OnPoolBytes("pinned", 0, 1LL << 28);
  obs->OnDeviceError(0, "illegal address");
  obs->OnServingChanged(true);
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

TEST(MetricsEndpoint, ServesOnPortZeroAndMatchesRender) {
  MetricsOptions options;
  options.listen_address = "127.0.0.1:0";
  options.backend = "cpu";
  auto obs = PrometheusObserver::Create(options);
  ASSERT_TRUE(obs.ok()) << obs.status();
  const int port = (*obs)->bound_port();
  ASSERT_GT(port, 0);
  (*obs)->OnRequestStart("Forward");
  (*obs)->OnRequestDone("Forward", absl::StatusCode::kOk, absl::Milliseconds(2), 10, 20);
  const std::string response = HttpGet(port, "/metrics");
  ASSERT_NE(response.find("200 OK"), std::string::npos) << response;
  const size_t body = response.find("\r\n\r\n");
  ASSERT_NE(body, std::string::npos);
  const Exposition e = Exposition::Parse(response.substr(body + 4));
  EXPECT_EQ(e.Value("conv1d_requests_total", {{"method", "Forward"}, {"code", "OK"}}), 1);
  EXPECT_EQ(e.Value("conv1d_sent_bytes_total", {{"method", "Forward"}}), 20);
  // Stopping must not wait out civetweb's 2 s listener poll: the server's
  // drain has a bound, and the observer is the last thing it destroys.
  const absl::Time t0 = absl::Now();
  obs->reset();
  EXPECT_LT(absl::Now() - t0, absl::Seconds(1));
  EXPECT_EQ(HttpGet(port, "/metrics", 500), "");
}

TEST(MetricsEndpoint, BindFailureIsAStatusNotAnException) {
  MetricsOptions options;
  options.listen_address = "127.0.0.1:0";
  auto first = PrometheusObserver::Create(options);
  ASSERT_TRUE(first.ok()) << first.status();
  options.listen_address = absl::StrCat("127.0.0.1:", (*first)->bound_port());
  auto second = PrometheusObserver::Create(options);
  ASSERT_FALSE(second.ok());
  // A taken port is a usage error (conv1d_server exits 2 naming it).
  EXPECT_EQ(second.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(second.status().message().find(options.listen_address),
            std::string::npos)
      << second.status();
  options.listen_address = "not-an-address:xyz";
  EXPECT_EQ(PrometheusObserver::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(MetricsEndpoint, PromtoolAcceptsTheExposition) {
  const std::string promtool = CONV1D_PROMTOOL;
  if (promtool.empty()) GTEST_SKIP() << "promtool not found at configure time";
  MetricsOptions options;
  options.listen_address = "";
  options.version = "0.1.0";
  options.git_sha = "deadbeef";
  options.backend = "gpu";
  options.devices = {"NVIDIA H200", "NVIDIA H200"};
  auto obs = PrometheusObserver::Create(options);
  ASSERT_TRUE(obs.ok()) << obs.status();
  DriveAllHooks(obs->get());
  const std::string text = (*obs)->Render();
  std::string output;
  EXPECT_EQ(testing::PromtoolCheckMetrics(promtool, text, &output), 0) << output;
  EXPECT_EQ(output, "") << output;
  // The check must be able to fail: a counter without _total is flagged.
  EXPECT_NE(testing::PromtoolCheckMetrics(
                promtool, "# HELP bad_seconds x\n# TYPE bad_seconds counter\nbad_seconds 1\n",
                &output),
            0);
}

// Metric names used by PromQL in deploy/, minus histogram/counter suffixes
// that belong to an exported family.
std::set<std::string> QueriedNames(const std::string& text) {
  std::set<std::string> names;
  static const std::regex re("conv1d_[a-z0-9_]+");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re);
       it != std::sregex_iterator(); ++it) {
    names.insert(it->str());
  }
  return names;
}

TEST(MetricsEndpoint, DashboardsAndAlertsQueryExportedMetrics) {
  auto obs = PrometheusObserver::Create(MetricsOptions{.listen_address = ""});
  ASSERT_TRUE(obs.ok()) << obs.status();
  DriveAllHooks(obs->get());
  const Exposition e = Exposition::Parse((*obs)->Render());
  std::set<std::string> exported;
  for (const std::string& n : e.Names()) exported.insert(n);
  const std::string root = CONV1D_SOURCE_DIR;
  for (const char* file : {"/deploy/grafana/conv1d-dashboard.json",
                           "/deploy/prometheus/alerts.yml"}) {
    SCOPED_TRACE(file);
    const std::string text = ReadFile(root + file);
    ASSERT_FALSE(text.empty());
    const std::set<std::string> used = QueriedNames(text);
    EXPECT_GE(used.size(), 5u);
    for (const std::string& name : used) {
      // Job and rule names such as "conv1d_serve" are not metrics.
      if (name == "conv1d_serve" || name.rfind("conv1d_serve_", 0) == 0) continue;
      EXPECT_TRUE(exported.count(name)) << name << " is not exported";
    }
  }
}

}  // namespace
}  // namespace conv1d
