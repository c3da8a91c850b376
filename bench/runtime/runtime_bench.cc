// conv1d_runtime_bench: the scheduler + gpu backend in process, no gRPC.
//
// 64 submitter threads (closed loop) hand tasks straight to the scheduler.
// Each workload runs fused (max_batch_requests=64) and unfused
// (max_batch_requests=1). In the same run a pinned async copy of the same
// bytes in and out (H2D and D2H on two streams, overlapping) gives the
// ceiling. Every submitter's first answer per workload is checked against
// the CPU implementation. Writes
//   bench/results/runtime-<device>-<date>.csv
// with mode,workload,submitters,throughput_rps,gbps,pct_of_pinned_copy,p50_us,p99_us
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "server/backends/cpu/cpu_conv.h"
#include "server/backends/gpu/gpu_backend.h"
#include "server/backends/gpu/gpu_runtime.h"
#include "server/core/clock.h"
#include "server/core/scheduler.h"

ABSL_FLAG(double, duration_s, 3.0, "measured seconds per (mode, workload)");
ABSL_FLAG(double, warmup_s, 1.0, "unmeasured seconds before each measurement");
ABSL_FLAG(int, submitters, 64, "closed-loop submitter threads");
ABSL_FLAG(std::string, workloads, "decode-fwd,small-fwd,large-fwd,large-bwd",
          "comma list of workloads");
ABSL_FLAG(int, lanes_per_device, 4, "gpu backend lanes per device");
ABSL_FLAG(std::string, out, "", "CSV path (default bench/results/runtime-<device>-<date>.csv)");

namespace conv1d {
namespace {

struct Workload {
  std::string name;
  Op op;
  DType dtype;
  int64_t b, d, l;
  bool registered;  // weights registered (device-cached) vs inline
  bool states;      // initial_states in, final_states out
};

Workload WorkloadByName(const std::string& n) {
  if (n == "decode-fwd") return {n, Op::kForward, DType::kF32, 1, 5120, 1, true, true};
  if (n == "small-fwd") return {n, Op::kForward, DType::kF32, 1, 2048, 128, false, false};
  if (n == "large-fwd") return {n, Op::kForward, DType::kBF16, 4, 2048, 2048, false, false};
  if (n == "large-bwd") return {n, Op::kBackward, DType::kBF16, 4, 2048, 2048, false, false};
  std::fprintf(stderr, "unknown workload '%s'\n", n.c_str());
  std::exit(2);
}

BatchKey KeyOf(const Workload& w) {
  BatchKey k;
  k.op = w.op;
  k.x_dtype = k.weight_dtype = k.grad_weight_dtype = w.dtype;
  k.dim = w.d;
  k.width = 4;
  k.activation = Activation::kSiLU;
  k.has_bias = true;
  k.has_initial_states = w.states;
  k.return_final_states = w.states && w.op == Op::kForward;
  return k;
}

std::vector<uint8_t> Random(DType t, int64_t n, std::mt19937_64& rng) {
  std::vector<uint8_t> v(n * DTypeSize(t));
  std::normal_distribution<float> dist(0.f, 1.f);
  for (int64_t i = 0; i < n; ++i) StoreFromFloat(v.data(), t, i, dist(rng));
  return v;
}

// Input sets shared read-only by all submitters, with CPU answers.
struct InputSet {
  ConvBuffers buffers;  // inputs + CPU-computed outputs
  std::shared_ptr<const void> weight_owner;
};

bool Close(DType t, const std::vector<uint8_t>& got, const std::vector<uint8_t>& want) {
  if (got.size() != want.size()) return false;
  const int64_t n = static_cast<int64_t>(want.size()) / DTypeSize(t);
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double a = LoadAsFloat(got.data(), t, i), b = LoadAsFloat(want.data(), t, i);
    if (std::isnan(a)) return false;
    num += (a - b) * (a - b);
    den += b * b;
  }
  return std::sqrt(num / std::max(den, 1e-30)) <= (t == DType::kF32 ? 1e-5 : 1.5e-2);
}

struct Result {
  double rps = 0, gbps = 0, p50_us = 0, p99_us = 0;
  int64_t wrong = 0, errors = 0;
};

Result RunMode(GpuBackend* gpu, const Workload& w, std::vector<InputSet>& sets,
               int32_t max_batch_requests, int submitters) {
  SchedulerOptions so;
  so.max_batch_requests = max_batch_requests;
  so.max_queued_requests = 1 << 16;
  auto sched = Scheduler::Create(so, gpu, Clock::Real(), nullptr);
  if (!sched.ok()) {
    std::fprintf(stderr, "%s\n", sched.status().ToString().c_str());
    std::exit(1);
  }
  const BatchKey key = KeyOf(w);
  std::atomic<int> phase{0};  // 0 warm-up, 1 measure, 2 stop
  std::atomic<int64_t> wrong{0}, errors{0};
  std::vector<std::vector<double>> lat(submitters);
  std::vector<int64_t> done(submitters, 0);
  std::vector<std::thread> threads;
  for (int s = 0; s < submitters; ++s) {
    threads.emplace_back([&, s] {
      InputSet& in = sets[s % sets.size()];
      ConvBuffers mine = in.buffers;  // own outputs, same inputs
      ConvSegment seg = mine.Segment();
      seg.x = in.buffers.Segment().x;  // read the shared inputs in place
      if (w.registered) {
        seg.weight.owner = seg.bias.owner = in.weight_owner;
        seg.weight.data = in.buffers.weight.data();
        seg.bias.data = in.buffers.bias.data();
        seg.weight.cache_id = 1000 + 2 * (s % sets.size());
        seg.bias.cache_id = seg.weight.cache_id + 1;
      }
      bool checked = false;
      while (phase.load() < 2) {
        if (!checked) {
          std::fill(mine.y.begin(), mine.y.end(), 0xff);
          std::fill(mine.dx.begin(), mine.dx.end(), 0xff);
        }
        auto task = std::make_unique<Task>();
        task->key = key;
        task->segment = seg;
        absl::Notification finished;
        absl::Status outcome;
        task->on_done = [&](const absl::Status& st, const TaskTimings&) {
          outcome = st;
          finished.Notify();
        };
        const absl::Time t0 = absl::Now();
        absl::Status st = (*sched)->Submit(&task);
        if (!st.ok()) {
          errors.fetch_add(1);
          continue;
        }
        finished.WaitForNotification();
        const double us = absl::ToDoubleMicroseconds(absl::Now() - t0);
        if (!outcome.ok()) errors.fetch_add(1);
        if (!checked) {
          checked = true;
          const bool ok = w.op == Op::kForward
                              ? Close(w.dtype, mine.y, in.buffers.y)
                              : Close(w.dtype, mine.dx, in.buffers.dx) &&
                                    Close(w.dtype, mine.dweight, in.buffers.dweight);
          if (!ok) wrong.fetch_add(1);
        }
        if (phase.load() == 1) {
          lat[s].push_back(us);
          ++done[s];
        }
      }
    });
  }
  absl::SleepFor(absl::Seconds(absl::GetFlag(FLAGS_warmup_s)));
  phase = 1;
  const absl::Time start = absl::Now();
  absl::SleepFor(absl::Seconds(absl::GetFlag(FLAGS_duration_s)));
  phase = 2;
  const double secs = absl::ToDoubleSeconds(absl::Now() - start);
  for (auto& t : threads) t.join();
  (*sched)->Shutdown();
  std::vector<double> all;
  int64_t n = 0;
  for (int s = 0; s < submitters; ++s) {
    all.insert(all.end(), lat[s].begin(), lat[s].end());
    n += done[s];
  }
  std::sort(all.begin(), all.end());
  Result r;
  r.rps = n / secs;
  ConvBuffers& b = sets[0].buffers;
  const int64_t moved = static_cast<int64_t>(b.x.size() + b.dout.size() + b.initial_states.size() +
                                             b.y.size() + b.dx.size() + b.final_states.size());
  r.gbps = r.rps * moved / 1e9;
  if (!all.empty()) {
    r.p50_us = all[all.size() / 2];
    r.p99_us = all[std::min(all.size() - 1, all.size() * 99 / 100)];
  }
  r.wrong = wrong.load();
  r.errors = errors.load();
  return r;
}

// Bytes a lane copies in and out for one request of `w`.
void CopyBytes(const Workload& w, const ConvBuffers& b, int64_t* in, int64_t* out) {
  *in = b.x.size() + b.dout.size() + b.initial_states.size() +
        (w.registered ? 0 : b.weight.size() + b.bias.size());
  *out = b.y.size() + b.dx.size() + b.final_states.size() +
         (w.op == Op::kBackward ? (w.d * 4 + w.d) * 4 : 0);
}

// Seconds per request of pinned async copies alone: `reqs` requests' worth
// of bytes in (H2D) and out (D2H) on two streams at once, median of 10.
double PinnedCopySecondsPerRequest(int64_t in, int64_t out, int reqs) {
  const int64_t cap = int64_t{512} << 20;
  reqs = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(reqs, cap / std::max(in, out))));
  void *h_in, *h_out, *d_in, *d_out;
  gpu::PinnedAlloc(&h_in, in * reqs);
  gpu::PinnedAlloc(&h_out, out * reqs);
  gpu::DeviceAlloc(&d_in, in * reqs);
  gpu::DeviceAlloc(&d_out, out * reqs);
  std::memset(h_in, 1, in * reqs);
  hipStream_t s1, s2;
  hipStreamCreate(&s1);
  hipStreamCreate(&s2);
  std::vector<double> times;
  for (int rep = 0; rep < 13; ++rep) {
    const absl::Time t0 = absl::Now();
    hipMemcpyAsync(d_in, h_in, in * reqs, hipMemcpyHostToDevice, s1);
    hipMemcpyAsync(h_out, d_out, out * reqs, hipMemcpyDeviceToHost, s2);
    hipStreamSynchronize(s1);
    hipStreamSynchronize(s2);
    if (rep >= 3) times.push_back(absl::ToDoubleSeconds(absl::Now() - t0));
  }
  std::sort(times.begin(), times.end());
  hipStreamDestroy(s1);
  hipStreamDestroy(s2);
  gpu::PinnedFree(h_in);
  gpu::PinnedFree(h_out);
  gpu::DeviceFree(d_in);
  gpu::DeviceFree(d_out);
  return times[times.size() / 2] / reqs;
}

std::string DeviceTag(const std::string& name) {
  const std::string lower = absl::AsciiStrToLower(name);
  for (const char* tag : {"h200", "h100", "mi300x", "mi300", "a100"}) {
    if (lower.find(tag) != std::string::npos) return tag;
  }
  std::string t;
  for (char c : lower) t += std::isalnum(static_cast<unsigned char>(c)) ? c : '-';
  return t;
}

int Main() {
  GpuBackendOptions go;
  go.lanes_per_device = absl::GetFlag(FLAGS_lanes_per_device);
  auto gpu = GpuBackend::Create(go);
  if (!gpu.ok()) {
    std::fprintf(stderr, "gpu backend: %s\n", gpu.status().ToString().c_str());
    return 1;
  }
  const std::string device = (*gpu)->devices()[0];
  auto pool = ThreadPool::Create({});
  const int submitters = absl::GetFlag(FLAGS_submitters);
  std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) {
    out = absl::StrCat("bench/results/runtime-", DeviceTag(device), "-",
                       absl::FormatTime("%Y-%m-%d", absl::Now(), absl::UTCTimeZone()), ".csv");
  }
  std::ofstream csv(out);
  csv << "mode,workload,submitters,throughput_rps,gbps,pct_of_pinned_copy,p50_us,p99_us\n";
  std::printf("device: %s, lanes/device %d, submitters %d\n", device.c_str(),
              go.lanes_per_device, submitters);
  std::printf("%-8s %-11s %12s %8s %8s %10s %10s %6s\n", "mode", "workload", "req/s", "GB/s",
              "%copy", "p50_us", "p99_us", "wrong");
  int64_t wrong_total = 0, errors_total = 0;
  for (const auto& name : absl::StrSplit(absl::GetFlag(FLAGS_workloads), ',')) {
    const Workload w = WorkloadByName(std::string(name));
    const BatchKey key = KeyOf(w);
    std::mt19937_64 rng(12345);
    std::vector<InputSet> sets(4);
    for (InputSet& set : sets) {
      ConvBuffers& b = set.buffers;
      b.key = key;
      b.batch = w.b;
      b.seqlen = w.l;
      b.x = Random(w.dtype, w.b * w.d * w.l, rng);
      b.weight = Random(w.dtype, w.d * 4, rng);
      b.bias = Random(w.dtype, w.d, rng);
      if (w.op == Op::kBackward) b.dout = Random(w.dtype, w.b * w.d * w.l, rng);
      if (w.states) b.initial_states = Random(w.dtype, w.b * w.d * 3, rng);
      if (!RunCpuConv(&b, pool->get()).ok()) return 1;
      set.weight_owner = std::make_shared<int>(0);
    }
    int64_t in = 0, outb = 0;
    CopyBytes(w, sets[0].buffers, &in, &outb);
    const double copy_s = PinnedCopySecondsPerRequest(in, outb, 64);
    for (const auto& [mode, max_req] : {std::pair<const char*, int>{"fused", 64}, {"unfused", 1}}) {
      const Result r = RunMode(gpu->get(), w, sets, max_req, submitters);
      const double pct = 100.0 * r.rps * copy_s;
      std::printf("%-8s %-11s %12.0f %8.2f %8.1f %10.0f %10.0f %6lld\n", mode, w.name.c_str(),
                  r.rps, r.gbps, pct, r.p50_us, r.p99_us, static_cast<long long>(r.wrong));
      csv << mode << "," << w.name << "," << submitters << "," << r.rps << "," << r.gbps << ","
          << pct << "," << r.p50_us << "," << r.p99_us << "\n";
      wrong_total += r.wrong;
      errors_total += r.errors;
    }
  }
  std::printf("wrote %s; wrong answers %lld, errors %lld\n", out.c_str(),
              static_cast<long long>(wrong_total), static_cast<long long>(errors_total));
  return wrong_total == 0 && errors_total == 0 ? 0 : 1;
}

}  // namespace
}  // namespace conv1d

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return conv1d::Main();
}
