// Unit tests of the client library's pure parts: tensor conversions, .npy
// I/O, workloads and presets, sweep-level parsing, percentile and stability
// arithmetic, retry delays, Prometheus parsing and scraping (http:// and
// https:// against an in-test plain socket; TLS settings), and the JSON/CSV
// reports. Each test is single-threaded apart from its own socket thread.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/host_tensor.h"
#include "client/load/https_get.h"
#include "client/load/prom_scrape.h"
#include "client/load/report.h"
#include "client/load/stats.h"
#include "client/npy.h"
#include "client/retry.h"
#include "client/verify.h"
#include "client/workload.h"
#include "gtest/gtest.h"
#include "tests/common/test_seed.h"

namespace conv1d {
namespace {

std::vector<float> RandomFloats(size_t n, uint32_t seed, float lo = -3.f, float hi = 3.f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

TEST(HostTensor, Fp32RoundTripIsExact) {
  CONV1D_TEST_SEED_SCOPE(test_seed, 1);
  const std::vector<float> v = RandomFloats(1000, static_cast<uint32_t>(test_seed));
  HostTensor t = HostTensor::FromFloats(DType::kF32, {10, 100}, v);
  EXPECT_EQ(t.num_bytes(), 4000);
  EXPECT_EQ(t.ToFloats(), v);
}

TEST(HostTensor, Fp16AndBf16RoundWithinHalfUlp) {
  CONV1D_TEST_SEED_SCOPE(test_seed, 2);
  const std::vector<float> v = RandomFloats(4096, static_cast<uint32_t>(test_seed));
  for (DType dt : {DType::kF16, DType::kBF16}) {
    HostTensor t = HostTensor::FromFloats(dt, {4096}, v);
    ASSERT_EQ(t.num_bytes(), 8192);
    const std::vector<float> back = t.ToFloats();
    // fp16 keeps 11 significant bits, bf16 8: RNE error <= 2^-11 / 2^-8 relative.
    const double rel = dt == DType::kF16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
    for (size_t i = 0; i < v.size(); ++i) {
      ASSERT_LE(std::fabs(back[i] - v[i]), rel * std::fabs(v[i]) + 1e-7) << i;
    }
  }
}

TEST(HostTensor, KnownBitPatterns) {
  HostTensor h = HostTensor::FromFloats(DType::kF16, {3}, std::vector<float>{1.0f, -2.0f, 65504.f});
  uint16_t bits[3];
  std::memcpy(bits, h.data.data(), 6);
  EXPECT_EQ(bits[0], 0x3c00);
  EXPECT_EQ(bits[1], 0xc000);
  EXPECT_EQ(bits[2], 0x7bff);
  HostTensor b = HostTensor::FromFloats(DType::kBF16, {2}, std::vector<float>{1.0f, -0.5f});
  std::memcpy(bits, b.data.data(), 4);
  EXPECT_EQ(bits[0], 0x3f80);
  EXPECT_EQ(bits[1], 0xbf00);
}

TEST(HostTensor, ProtoRoundTripAndSizeCheck) {
  HostTensor t = HostTensor::Random(DType::kBF16, {2, 3, 5}, 7);
  v1::Tensor p = t.ToProto();
  EXPECT_EQ(p.dtype(), v1::BF16);
  absl::StatusOr<HostTensor> back = HostTensor::FromProto(p);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->shape, t.shape);
  EXPECT_EQ(back->data, t.data);
  p.mutable_data()->pop_back();
  EXPECT_EQ(HostTensor::FromProto(p).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(HostTensor, RandomIsSeededFreshAndInRange) {
  HostTensor a = HostTensor::Random(DType::kF32, {1000}, 5, -1, 1);
  HostTensor b = HostTensor::Random(DType::kF32, {1000}, 5, -1, 1);
  HostTensor c = HostTensor::Random(DType::kF32, {1000}, 6, -1, 1);
  EXPECT_EQ(a.data, b.data);
  EXPECT_NE(a.data, c.data);
  int zeros = 0;
  for (float v : a.ToFloats()) {
    ASSERT_GE(v, -1.f);
    ASSERT_LT(v, 1.f);
    zeros += v == 0.f;
  }
  EXPECT_LT(zeros, 3);
}

TEST(Npy, RoundTripEveryDtype) {
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    HostTensor t = HostTensor::Random(dt, {3, 4, 5}, 11);
    absl::StatusOr<HostTensor> back = ParseNpy(SerializeNpy(t));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->dtype, dt);
    EXPECT_EQ(back->shape, t.shape);
    EXPECT_EQ(back->data, t.data);
  }
}

TEST(Npy, HeaderIsAlignedAndNumpyShaped) {
  HostTensor t = HostTensor::FromFloats(DType::kF32, {7}, RandomFloats(7, 3));
  const std::string s = SerializeNpy(t);
  EXPECT_EQ((s.size() - 28) % 64, 0u);
  EXPECT_NE(s.find("'descr': '<f4'"), std::string::npos);
  EXPECT_NE(s.find("'shape': (7,)"), std::string::npos);
}

TEST(Npy, ParsesNumpyWrittenHeaderAndRejectsBadInput) {
  // Bytes as numpy 1.24 writes np.arange(6, dtype='<f2').reshape(2, 3).
  std::string header = "{'descr': '<f2', 'fortran_order': False, 'shape': (2, 3), }";
  header.append(118 - header.size() - 1, ' ');
  header.push_back('\n');
  std::string file = std::string("\x93NUMPY\x01\x00", 8) + std::string(1, static_cast<char>(header.size())) +
                     std::string(1, '\0') + header;
  const uint16_t vals[6] = {0x0000, 0x3c00, 0x4000, 0x4200, 0x4400, 0x4500};
  file.append(reinterpret_cast<const char*>(vals), sizeof vals);
  absl::StatusOr<HostTensor> t = ParseNpy(file);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(t->ToFloats(), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  EXPECT_FALSE(ParseNpy(file.substr(0, file.size() - 1)).ok());
  std::string fortran = file;
  fortran.replace(fortran.find("False"), 5, "True ");
  EXPECT_FALSE(ParseNpy(fortran).ok());
  std::string f8 = file;
  f8.replace(f8.find("<f2"), 3, "<f8");
  EXPECT_FALSE(ParseNpy(f8).ok());
}

TEST(Workload, PresetsMatchTheirDefinitions) {
  absl::StatusOr<WorkloadSpec> d = PresetWorkload("decode-fwd");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->op, WorkloadOp::kForward);
  EXPECT_EQ(std::make_tuple(d->batch, d->dim, d->seqlen), std::make_tuple(1, 5120, 1));
  EXPECT_EQ(d->dtype, DType::kF32);
  EXPECT_TRUE(d->initial_states && d->return_final_states && d->registered_weights);
  absl::StatusOr<WorkloadSpec> s = PresetWorkload("small-fwd");
  EXPECT_EQ(std::make_tuple(s->batch, s->dim, s->seqlen), std::make_tuple(1, 2048, 128));
  EXPECT_FALSE(s->registered_weights);
  absl::StatusOr<WorkloadSpec> lb = PresetWorkload("large-bwd");
  EXPECT_EQ(lb->op, WorkloadOp::kBackward);
  EXPECT_EQ(lb->dtype, DType::kBF16);
  EXPECT_EQ(std::make_tuple(lb->batch, lb->dim, lb->seqlen), std::make_tuple(4, 2048, 2048));
  for (const std::string& name : PresetNames()) {
    absl::StatusOr<WorkloadSpec> p = PresetWorkload(name);
    ASSERT_TRUE(p.ok()) << name;
    EXPECT_EQ(p->width, 4);
    EXPECT_TRUE(p->silu && p->bias);
  }
  EXPECT_FALSE(PresetWorkload("huge").ok());
}

TEST(Workload, BuildRequestCarriesShapesAndBytes) {
  WorkloadSpec s = *PresetWorkload("decode-fwd");
  s.weights_name = "w";
  WeightSet w = MakeWeights(s, 3);
  PreparedRequest p = BuildRequest(s, w, 9);
  ASSERT_NE(p.forward, nullptr);
  EXPECT_EQ(p.forward->weights_name(), "w");
  EXPECT_EQ(p.forward->x().shape_size(), 3);
  EXPECT_EQ(p.forward->initial_states().shape(2), 3);
  EXPECT_TRUE(p.forward->return_final_states());
  EXPECT_EQ(p.request_tensor_bytes, 5120 * 4 + 5120 * 3 * 4);
  s = *PresetWorkload("large-bwd");
  s.seqlen = 8;
  s.channel_last = true;
  p = BuildRequest(s, MakeWeights(s, 1), 2);
  ASSERT_NE(p.backward, nullptr);
  EXPECT_EQ(p.backward->x().shape(1), 8);  // [B, L, D]
  EXPECT_EQ(p.backward->layout(), v1::LAYOUT_CHANNEL_LAST);
  EXPECT_NE(p.backward->x().data(), p.backward->dout().data());
  EXPECT_EQ(p.request_tensor_bytes, 2 * 4 * 2048 * 8 * 2 + (2048 * 4 + 2048) * 2);
}

TEST(Workload, ParseShapeMixAndKeys) {
  int64_t b, d, l;
  ASSERT_TRUE(ParseShape("4x2048X16", &b, &d, &l).ok());
  EXPECT_EQ(std::make_tuple(b, d, l), std::make_tuple(4, 2048, 16));
  EXPECT_FALSE(ParseShape("4x2048", &b, &d, &l).ok());
  EXPECT_FALSE(ParseShape("4x0x2", &b, &d, &l).ok());
  absl::StatusOr<std::vector<WorkloadSpec>> mix = ParseMix(
      "# comment\nweight=3 preset=small-fwd\n\n weight=1 op=bwd shape=2x64x32 dtype=fp16 "
      "weight_dtype=fp32 layout=cl bias=0  # trailing\n",
      WorkloadSpec{});
  ASSERT_TRUE(mix.ok()) << mix.status();
  ASSERT_EQ(mix->size(), 2u);
  EXPECT_EQ((*mix)[0].mix_weight, 3);
  EXPECT_EQ((*mix)[0].dim, 2048);
  EXPECT_EQ((*mix)[1].op, WorkloadOp::kBackward);
  EXPECT_EQ((*mix)[1].dtype, DType::kF16);
  EXPECT_EQ((*mix)[1].weight_dtype, DType::kF32);
  EXPECT_TRUE((*mix)[1].channel_last);
  EXPECT_FALSE((*mix)[1].bias);
  absl::StatusOr<std::vector<WorkloadSpec>> bf = ParseMix("dtype=bf16", WorkloadSpec{});
  ASSERT_TRUE(bf.ok());
  EXPECT_EQ((*bf)[0].weight_dtype, DType::kBF16);
  EXPECT_FALSE(ParseMix("op=sideways", WorkloadSpec{}).ok());
  EXPECT_FALSE(ParseMix("shape", WorkloadSpec{}).ok());
  EXPECT_FALSE(ParseMix("# nothing\n", WorkloadSpec{}).ok());
}

TEST(Levels, ListsAndGeometricRanges) {
  EXPECT_EQ(*ParseLevels("1:64:2"), (std::vector<double>{1, 2, 4, 8, 16, 32, 64}));
  EXPECT_EQ(*ParseLevels("1:50:2"), (std::vector<double>{1, 2, 4, 8, 16, 32}));
  EXPECT_EQ(*ParseLevels("100:900:3"), (std::vector<double>{100, 300, 900}));
  EXPECT_EQ(*ParseLevels("1, 8,64"), (std::vector<double>{1, 8, 64}));
  EXPECT_EQ(*ParseLevels("5"), (std::vector<double>{5}));
  EXPECT_EQ(ParseLevels("0.1:1:10")->size(), 2u);
  EXPECT_FALSE(ParseLevels("1:64:1").ok());
  EXPECT_FALSE(ParseLevels("64:1:2").ok());
  EXPECT_FALSE(ParseLevels("1:2").ok());
  EXPECT_FALSE(ParseLevels("1,x").ok());
  EXPECT_FALSE(ParseLevels("0").ok());
}

TEST(Stats, NearestRankPercentiles) {
  std::vector<double> v;
  for (int i = 100; i >= 1; --i) v.push_back(i);  // unsorted on purpose
  LatencySummary s = Summarize(v);
  EXPECT_EQ(s.p50_us, 50);
  EXPECT_EQ(s.p90_us, 90);
  EXPECT_EQ(s.p95_us, 95);
  EXPECT_EQ(s.p99_us, 99);
  EXPECT_EQ(s.p999_us, 100);
  EXPECT_EQ(s.max_us, 100);
  EXPECT_DOUBLE_EQ(s.mean_us, 50.5);
  std::vector<double> one = {7};
  EXPECT_EQ(Percentile(one, 0), 7);
  EXPECT_EQ(Percentile(one, 99.9), 7);
  EXPECT_EQ(Percentile({}, 50), 0);
  // Ordered on random data too.
  std::vector<double> r(12345);
  CONV1D_TEST_SEED_SCOPE(test_seed, 4);
  std::mt19937 gen(test_seed);
  std::exponential_distribution<double> e(0.01);
  for (auto& x : r) x = e(gen);
  s = Summarize(r);
  EXPECT_LE(s.p50_us, s.p90_us);
  EXPECT_LE(s.p90_us, s.p95_us);
  EXPECT_LE(s.p95_us, s.p99_us);
  EXPECT_LE(s.p99_us, s.p999_us);
  EXPECT_LE(s.p999_us, s.max_us);
  EXPECT_EQ(s.p50_us, r[6172]);  // ceil(0.5 * 12345) - 1
}

TEST(Stats, StabilityRuleAndMerge) {
  EXPECT_TRUE(IsStable({100, 105, 95}, {10, 10.5, 9.6}, 3, 10));
  EXPECT_FALSE(IsStable({100, 130, 95}, {10, 10, 10}, 3, 10));
  EXPECT_FALSE(IsStable({100, 100, 100}, {10, 10, 14}, 3, 10));
  EXPECT_FALSE(IsStable({100, 100}, {10, 10}, 3, 10));
  EXPECT_TRUE(IsStable({500, 100, 101, 99}, {1, 10, 10, 10}, 3, 5));
  WindowStats a, b;
  a.duration_s = 1, a.completed = 10, a.errors = 1, a.errors_by_code["UNAVAILABLE"] = 1;
  a.latencies_us = {1, 2};
  b.duration_s = 2, b.completed = 20, b.errors_by_code["UNAVAILABLE"] = 2;
  b.latencies_us = {3};
  b.bytes = 3e9;
  a.Merge(b);
  EXPECT_EQ(a.completed, 30);
  EXPECT_EQ(a.errors_by_code["UNAVAILABLE"], 3);
  EXPECT_EQ(a.latencies_us.size(), 3u);
  EXPECT_DOUBLE_EQ(a.throughput_rps(), 29.0 / 3);  // successes only
  EXPECT_DOUBLE_EQ(a.gbps(), 1);
}

TEST(Retry, BackoffGrowsCapsJittersAndHonoursPushback) {
  RetryPolicy p;
  p.initial_backoff = absl::Milliseconds(10);
  p.max_backoff = absl::Milliseconds(100);
  p.backoff_multiplier = 2;
  p.jitter = 0.2;
  EXPECT_EQ(BackoffDelay(p, 1, 0.5, {}), absl::Milliseconds(10));
  EXPECT_EQ(BackoffDelay(p, 3, 0.5, {}), absl::Milliseconds(40));
  EXPECT_EQ(BackoffDelay(p, 10, 0.5, {}), absl::Milliseconds(100));
  EXPECT_EQ(BackoffDelay(p, 1, 0.0, {}), absl::Milliseconds(8));
  EXPECT_GT(BackoffDelay(p, 1, 0.999, {}), absl::Milliseconds(11.9));
  Pushback pb = ParsePushback("250");
  EXPECT_TRUE(pb.present && !pb.dont_retry);
  EXPECT_EQ(BackoffDelay(p, 1, 0.3, pb), absl::Milliseconds(250));
  EXPECT_TRUE(ParsePushback("-1").dont_retry);
  EXPECT_TRUE(ParsePushback("soon").dont_retry);
  EXPECT_TRUE(p.IsRetryable(absl::StatusCode::kUnavailable));
  EXPECT_TRUE(p.IsRetryable(absl::StatusCode::kResourceExhausted));
  EXPECT_FALSE(p.IsRetryable(absl::StatusCode::kInvalidArgument));
  EXPECT_FALSE(p.IsRetryable(absl::StatusCode::kDeadlineExceeded));
}

TEST(Prometheus, SumsSamplesAcrossLabels) {
  const char* text =
      "# HELP conv1d_requests_total Requests.\n"
      "# TYPE conv1d_requests_total counter\n"
      "conv1d_requests_total{method=\"Forward\",code=\"OK\"} 120\n"
      "conv1d_requests_total{method=\"Forward\",code=\"RESOURCE_EXHAUSTED\"} 7\n"
      "conv1d_requests_total{method=\"Backward\",code=\"OK\"} 3 1700000000000\n"
      "conv1d_requests_total_other 1000\n"
      "conv1d_compute_seconds_sum 0.25\n"
      "conv1d_compute_seconds_count 1e3\n";
  EXPECT_EQ(SumMetric(text, "conv1d_requests_total"), 130);
  EXPECT_EQ(SumMetric(text, "conv1d_requests_total", "method=\"Forward\""), 127);
  EXPECT_EQ(SumMetric(text, "conv1d_compute_seconds_sum"), 0.25);
  EXPECT_EQ(SumMetric(text, "conv1d_compute_seconds_count"), 1000);
  EXPECT_EQ(SumMetric(text, "absent"), 0);
  int samples = -1;
  EXPECT_EQ(SumMetric(text, "conv1d_requests_total", "", &samples), 130);
  EXPECT_EQ(samples, 3) << text;
  EXPECT_FALSE(HttpGet("ftp://x/metrics", absl::Seconds(1)).ok());
}

// A loopback listener that answers each of `connections` connections with
// `answer` once it has read something, then closes it.
class CannedHttpServer {
 public:
  CannedHttpServer(std::string answer, int connections) : answer_(std::move(answer)) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(listen(fd_, 4), 0);
    socklen_t len = sizeof(addr);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this, connections] {
      for (int i = 0; i < connections; ++i) {
        const int c = accept(fd_, nullptr, nullptr);
        if (c < 0) return;
        char buf[4096];
        if (recv(c, buf, sizeof(buf), 0) > 0) {
          (void)!send(c, answer_.data(), answer_.size(), MSG_NOSIGNAL);
        }
        close(c);
      }
    });
  }
  ~CannedHttpServer() {
    thread_.join();
    close(fd_);
  }
  std::string Url(const char* scheme) const {
    return absl::StrCat(scheme, "://127.0.0.1:", port_, "/metrics");
  }

 private:
  const std::string answer_;
  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
};

TEST(Prometheus, HttpGetSpeaksHttpAndRefusesANonTlsHttpsEndpoint) {
  CannedHttpServer server("HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nup 1\n", 2);
  absl::StatusOr<std::string> body = HttpGet(server.Url("http"), absl::Seconds(5));
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_EQ(*body, "up 1\n");
  // The same endpoint as https://: a clear error naming the URL, no crash.
  const std::string url = server.Url("https");
  body = HttpGet(url, absl::Seconds(5));
  ASSERT_FALSE(body.ok());
  EXPECT_EQ(body.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StartsWith(body.status().message(), url + ": TLS handshake failed: "))
      << body.status();
  absl::StatusOr<std::string> bad = HttpGet("ftp://x/metrics", absl::Seconds(1));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "is not http:// or https://"));
}

TEST(Prometheus, ScrapeTlsSettingsNameTheirFlag) {
  EXPECT_TRUE(ScrapeTls::Create({}).ok());  // the system's default CAs
  const std::string dir = ::testing::TempDir();
  // Named per process: ctest may run this binary's cases side by side.
  const std::string junk = absl::StrCat(dir, "/conv1d_scrape_tls_junk_", getpid(), ".pem");
  std::ofstream(junk) << "not a certificate\n";
  const std::string absent = absl::StrCat(dir, "/conv1d_scrape_tls_absent_", getpid(), ".pem");
  struct Case {
    ScrapeTlsOptions options;
    std::string message;
  };
  const Case cases[] = {
      {{"", "c.pem", ""}, "--metrics_tls_cert: needs --metrics_tls_key"},
      {{"", "", "k.pem"}, "--metrics_tls_key: needs --metrics_tls_cert"},
      {{absent, "", ""}, "--metrics_tls_ca: cannot read '" + absent + "'"},
      {{junk, "", ""}, "--metrics_tls_ca: '" + junk + "' is not a PEM CA bundle"},
      {{"", absent, junk}, "--metrics_tls_cert: cannot read '" + absent + "'"},
      {{"", junk, absent}, "--metrics_tls_key: cannot read '" + absent + "'"},
      {{"", junk, junk}, "--metrics_tls_cert: '" + junk + "' is not a PEM certificate"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::shared_ptr<const ScrapeTls>> t = ScrapeTls::Create(c.options);
    ASSERT_FALSE(t.ok()) << c.message;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StartsWith(t.status().message(), c.message)) << t.status();
  }
  std::remove(junk.c_str());
}

TEST(Report, JsonAndCsvCarryEveryStep) {
  RunReport r;
  r.mode = "concurrency";
  r.workloads = {"fwd \"quoted\""};
  StepResult s;
  s.level = 8;
  s.requests = 100;
  s.errors = 2;
  s.errors_by_code["RESOURCE_EXHAUSTED"] = 2;
  s.latency.p99_us = 123.5;
  s.latency.count = 98;
  r.steps = {s, s};
  const std::string j = ReportJson(r);
  EXPECT_NE(j.find("\"steps\": ["), std::string::npos);
  EXPECT_NE(j.find("\"concurrency\": 8"), std::string::npos);
  EXPECT_NE(j.find("\"errors_by_code\": {\"RESOURCE_EXHAUSTED\": 2}"), std::string::npos);
  EXPECT_NE(j.find("fwd \\\"quoted\\\""), std::string::npos);
  const std::string c = ReportCsv(r);
  EXPECT_EQ(std::count(c.begin(), c.end(), '\n'), 3);
  // row, step, index, name, mode, concurrency, rate (empty in closed loop),
  // requests, errors, codes.
  EXPECT_NE(c.find("\nstep,1,,,concurrency,8,,100,2,RESOURCE_EXHAUSTED:2,"), std::string::npos)
      << c;
  EXPECT_NE(j.find("\"p99_us\": 123.5"), std::string::npos);
}

TEST(Report, CsvColumnsAreTheJsonStepFields) {
  RunReport r;
  r.mode = "rate";
  StepResult s;
  s.closed_loop = false;
  s.level = 250;
  s.requests = 10;
  s.window_s = 0.5;
  s.measured_s = 1.5;
  s.server_requests = 10;
  s.server_queue_mean_us = 3;
  s.server_compute_mean_us = 4;
  r.steps = {s};
  const std::string c = ReportCsv(r);
  const std::string header = c.substr(0, c.find('\n'));
  EXPECT_EQ(header, "row,step,index,name,mode," + absl::StrJoin(StepColumns(), ","));
  // Every column but the closed loop's level and the GPU figures (not
  // scraped) is a key of the JSON step.
  const std::string j = ReportJson(r);
  for (const std::string& column : StepColumns()) {
    const bool in_json = j.find("\"" + column + "\": ") != std::string::npos;
    EXPECT_EQ(in_json, column != "concurrency" && !absl::StartsWith(column, "gpu_")) << column;
  }
  EXPECT_NE(c.find("\nstep,0,,,rate,,250,10,"), std::string::npos) << c;
  EXPECT_NE(c.find(",0.5,1.5,"), std::string::npos) << c;  // window_s, measured_s
}

TEST(Report, WindowAndWorkloadRowsAndNothingMeasured) {
  RunReport r;
  r.mode = "concurrency";
  StepResult s;
  s.level = 4;
  RowResult w0, w1, mix;
  w0.index = 0, w0.requests = 7, w0.latency.count = 7, w0.latency.p99_us = 50;
  w1.index = 1, w1.requests = 3, w1.errors = 3, w1.errors_by_code["UNAVAILABLE"] = 3;
  mix.index = 0, mix.name = "fwd a,b", mix.requests = 10;
  s.window_rows = {w0, w1};
  s.workload_rows = {mix};
  r.steps = {s};
  r.searched = true;
  r.search.p99_bound_us = 2000;
  const std::string j = ReportJson(r);
  EXPECT_NE(j.find("{\"window\": 0, \"requests\": 7,"), std::string::npos) << j;
  EXPECT_NE(j.find("\"p99_us\": 50"), std::string::npos) << j;
  // A window without a success: its latency figures are null, not 0.
  EXPECT_NE(j.find("{\"window\": 1, \"requests\": 3, \"errors\": 3, \"errors_by_code\": "
                   "{\"UNAVAILABLE\": 3}, \"throughput_rps\": 0, \"gbps\": 0, "
                   "\"p50_us\": null"),
            std::string::npos)
      << j;
  EXPECT_NE(j.find("{\"workload\": 0, \"name\": \"fwd a,b\", \"requests\": 10"),
            std::string::npos)
      << j;
  EXPECT_NE(j.find("\"search\": {\"p99_bound_us\": 2000, \"found\": false}"),
            std::string::npos)
      << j;
  const std::string c = ReportCsv(r);
  EXPECT_EQ(std::count(c.begin(), c.end(), '\n'), 5);  // header, step, 2 windows, 1 workload
  EXPECT_NE(c.find("\nwindow,0,1,,concurrency,,,3,3,UNAVAILABLE:3,0,0,n/a,n/a,"),
            std::string::npos)
      << c;
  EXPECT_NE(c.find("\nworkload,0,0,fwd a;b,concurrency,"), std::string::npos) << c;
  EXPECT_NE(StepLine(s).find("p50       n/a"), std::string::npos) << StepLine(s);
}

TEST(Stats, MergeKeepsWorkloadsApart) {
  WindowStats a, b;
  a.by_workload.resize(2);
  b.by_workload.resize(2);
  a.by_workload[0].completed = 2, a.by_workload[0].latencies_us = {1, 2};
  b.by_workload[1].completed = 1, b.by_workload[1].errors = 1;
  b.by_workload[1].errors_by_code["INTERNAL"] = 1;
  a.Merge(b);
  EXPECT_EQ(a.by_workload[0].completed, 2);
  EXPECT_EQ(a.by_workload[1].completed, 1);
  EXPECT_EQ(a.by_workload[1].errors_by_code["INTERNAL"], 1);
  EXPECT_EQ(a.by_workload[0].latencies_us.size(), 2u);
  std::vector<double> none;
  EXPECT_EQ(Summarize(none).count, 0);
}

// The --verify path: the CPU reference against an in-test float64 forward.
TEST(Verify, ForwardReferenceAcceptsRightAndRejectsWrongAnswers) {
  if (!ReferenceAvailable()) GTEST_SKIP() << "built without the CPU backend";
  WorkloadSpec s;
  s.batch = 2, s.dim = 5, s.seqlen = 9, s.width = 3;
  s.initial_states = true;
  s.return_final_states = true;
  const WeightSet w = MakeWeights(s, 21);
  const PreparedRequest p = BuildRequest(s, w, 22);
  const std::vector<double> x = HostTensor::FromProto(p.forward->x())->ToDoubles();
  const std::vector<double> init = HostTensor::FromProto(p.forward->initial_states())->ToDoubles();
  const std::vector<double> wt = w.weight.ToDoubles(), bias = w.bias.ToDoubles();
  std::vector<float> y(2 * 5 * 9), fin(2 * 5 * 2);
  for (int b = 0; b < 2; ++b) {
    for (int d = 0; d < 5; ++d) {
      auto xt = [&](int t) {  // x preceded by the 2 initial states
        return t < 2 ? init[(b * 5 + d) * 2 + t] : x[(b * 5 + d) * 9 + t - 2];
      };
      for (int t = 0; t < 9; ++t) {
        double z = bias[d];
        for (int k = 0; k < 3; ++k) z += wt[d * 3 + k] * xt(t + k);
        y[(b * 5 + d) * 9 + t] = static_cast<float>(z / (1 + std::exp(-z)));
      }
      for (int k = 0; k < 2; ++k) fin[(b * 5 + d) * 2 + k] = static_cast<float>(xt(9 + k));
    }
  }
  v1::ForwardResponse resp;
  HostTensor::FromFloats(DType::kF32, {2, 5, 9}, y).ToProto(resp.mutable_y());
  HostTensor::FromFloats(DType::kF32, {2, 5, 2}, fin).ToProto(resp.mutable_final_states());
  absl::Status ok = VerifyResponse(*p.forward, resp, nullptr);
  EXPECT_TRUE(ok.ok()) << ok;
  y[17] += 0.05f;
  HostTensor::FromFloats(DType::kF32, {2, 5, 9}, y).ToProto(resp.mutable_y());
  absl::Status bad = VerifyResponse(*p.forward, resp, nullptr);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInternal);
  EXPECT_NE(bad.message().find("1 of 90"), absl::string_view::npos) << bad;
  resp.clear_final_states();
  y[17] -= 0.05f;
  HostTensor::FromFloats(DType::kF32, {2, 5, 9}, y).ToProto(resp.mutable_y());
  EXPECT_EQ(VerifyResponse(*p.forward, resp, nullptr).code(), absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace conv1d
