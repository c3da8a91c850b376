// conv1d_runtime_bench: the scheduler + gpu backend in process, no gRPC.
//
// 64 submitter threads (closed loop) hand tasks straight to the scheduler.
// Each workload runs fused (max_batch_requests=64) and unfused
// (max_batch_requests=1). In the same run a pinned async copy of the same
// bytes in and out (H2D and D2H on two streams, overlapping) gives the
// ceiling, measured before the first mode and after each and taken as the
// median. Every submitter's first answer per workload is checked against
// the CPU implementation. With --noop_rows it also runs both modes on a
// backend that computes nothing (`noop-fused`, `noop-unfused`): the same
// scheduler, lanes and closed-loop submitters with no device work, i.e. the
// rate the harness itself allows on this host. Writes
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
#include <tuple>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "server/backends/cpu/cpu_conv.h"
#include "server/backends/gpu/gpu_backend.h"
#include "server/backends/gpu/gpu_runtime.h"
#include "server/core/clock.h"
#include "server/core/observer.h"
#include "server/core/scheduler.h"
#include "server/core/state_slots.h"

ABSL_FLAG(double, duration_s, 3.0, "measured seconds per (mode, workload)");
ABSL_FLAG(double, warmup_s, 1.0, "unmeasured seconds before each measurement");
ABSL_FLAG(int, submitters, 64, "closed-loop submitter threads");
ABSL_FLAG(std::string, workloads, "decode-fwd,decode-session,small-fwd,large-fwd,large-bwd",
          "comma list of workloads (also: decode-bf16, chunk-fwd, decode-update)");
ABSL_FLAG(int, lanes_per_device, 4, "gpu backend lanes per device");
ABSL_FLAG(std::string, request_memory, "both",
          "where request tensors live: host-pool (GpuBackend::host_buffers(), page-locked), "
          "heap, or both");
ABSL_FLAG(int64_t, host_pool_bytes, int64_t{6} << 30, "gpu backend host pool (page-locked)");
ABSL_FLAG(int64_t, direct_copy_bytes, int64_t{256} << 10,
          "gpu backend: smallest host-pool tensor moved by its own DMA");
ABSL_FLAG(bool, gather_small_host_tensors, true,
          "gpu backend: move small host-pool tensors by the gather/scatter copy kernels "
          "(false: pack them through staging)");
ABSL_FLAG(bool, in_place_host_tensors, true,
          "gpu backend: the kernel reads and writes small host-pool tensors of short forward "
          "rows (decode steps) in place");
ABSL_FLAG(bool, shared_copy_streams, true,
          "gpu backend: one H2D and one D2H stream per device shared by the lanes");
ABSL_FLAG(bool, batch_copies, true,
          "gpu backend: queue a round's DMAs per direction with one batch call");
ABSL_FLAG(int64_t, shared_copy_min_bytes, int64_t{1} << 20,
          "gpu backend: rounds whose DMAs move fewer bytes keep their copies on the lane's stream");
ABSL_FLAG(int64_t, max_queue_delay_us, 0,
          "scheduler: how long a lane waits for a fused batch to fill (fused mode only)");
ABSL_FLAG(int32_t, completion_threads, 4,
          "scheduler threads that share out the on_done calls of fused batches "
          "with the lane (0: the lane calls them all)");
ABSL_FLAG(int64_t, max_batch_bytes, conv1d::SchedulerOptions().max_batch_bytes,
          "scheduler: bytes (in plus out) per fused batch (fused mode only)");
ABSL_FLAG(int32_t, completion_chunk, 8,
          "scheduler: fewest on_done calls a completion thread takes from a fused batch");
ABSL_FLAG(std::string, timeline, "",
          "CSV of every measured batch (lane, start, busy and stage microseconds); empty: none");
ABSL_FLAG(int, timeline_batches, 200, "batches per mode written to --timeline");
ABSL_FLAG(std::string, out, "", "CSV path (default bench/results/runtime-<device>-<date>.csv)");
ABSL_FLAG(bool, noop_rows, true,
          "also run each workload's fused and unfused modes on a backend that returns at once "
          "(rows noop-fused / noop-unfused): the closed loop's own ceiling on this host");

namespace conv1d {
namespace {

struct Workload {
  std::string name;
  Op op;
  DType dtype;
  int64_t b, d, l;
  bool registered;  // weights registered (device-cached) vs inline
  bool states;      // initial_states in, final_states out (update: conv_state
                    // of W-1 in, conv_state_out out)
  bool slots = false;  // update: conv_state kept in the backend's decode-session
                       // state slots (device memory on gpu), one per submitter
};

Workload WorkloadByName(const std::string& n) {
  if (n == "decode-fwd") return {n, Op::kForward, DType::kF32, 1, 5120, 1, true, true};
  if (n == "small-fwd") return {n, Op::kForward, DType::kF32, 1, 2048, 128, false, false};
  if (n == "large-fwd") return {n, Op::kForward, DType::kBF16, 4, 2048, 2048, false, false};
  if (n == "large-bwd") return {n, Op::kBackward, DType::kBF16, 4, 2048, 2048, false, false};
  // Not in the default set: decode in bf16, and short prefill chunks
  // (vector-path short rows, with states).
  if (n == "decode-bf16") return {n, Op::kForward, DType::kBF16, 1, 5120, 1, true, true};
  if (n == "chunk-fwd") return {n, Op::kForward, DType::kF32, 1, 1024, 32, true, true};
  // Decode through the update op: one token and its conv_state of W-1.
  if (n == "decode-update") return {n, Op::kUpdate, DType::kF32, 1, 5120, 1, true, true};
  // Decode steps of sessions: the update with its conv_state in a state
  // slot that stays on the device; only x and y cross the bus.
  if (n == "decode-session") {
    Workload w{n, Op::kUpdate, DType::kF32, 1, 5120, 1, true, true};
    w.slots = true;
    return w;
  }
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
  k.has_initial_states = w.states && w.op != Op::kUpdate;
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
  // Copies of x, dout and initial_states (update: conv_state) in the
  // backend's host buffers (what a frontend that receives into that memory
  // hands over), and the kind of that memory.
  std::shared_ptr<void> host_x, host_dout, host_init;
  MemoryKind host_kind = MemoryKind::kHostHeap;
};

// `bytes` of the backend's host buffers (heap memory when it has none).
HostBuffer HostAlloc(Backend* backend, int64_t bytes) {
  std::shared_ptr<HostBufferProvider> buffers = backend->host_buffers();
  return buffers != nullptr ? buffers->Allocate(bytes) : HeapHostBuffers().Allocate(bytes);
}

// A copy of `v` in the backend's host memory.
std::shared_ptr<void> HostCopy(Backend* backend, const std::vector<uint8_t>& v,
                               MemoryKind* kind) {
  HostBuffer p = HostAlloc(backend, static_cast<int64_t>(v.size()));
  if (!v.empty()) std::memcpy(p.data.get(), v.data(), v.size());
  *kind = p.kind;
  return p.data;
}

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

// Where a request's closed-loop cycle goes, summed over measured requests:
// submit (Submit called -> enqueued), queue (-> a lane takes its batch),
// lane (-> the backend returns), complete (-> its on_done runs), wake
// (-> the submitter thread runs again), next (-> its next Submit).
struct Cycle {
  enum Part { kSubmit, kQueue, kLane, kComplete, kWake, kNext, kParts };
  double seconds[kParts] = {};
  int64_t n = 0;
  void Add(const Cycle& o) {
    for (int p = 0; p < kParts; ++p) seconds[p] += o.seconds[p];
    n += o.n;
  }
  std::string Summary() const {
    if (n == 0) return "no requests";
    static constexpr const char* kNames[kParts] = {"submit", "queue", "lane",
                                                   "complete", "wake", "next"};
    std::string out = "us/request:";
    for (int p = 0; p < kParts; ++p) {
      absl::StrAppendFormat(&out, "%s %s %.1f", p == 0 ? "" : ",", kNames[p],
                            1e6 * seconds[p] / static_cast<double>(n));
    }
    return out;
  }
};

struct Result {
  double rps = 0, gbps = 0, p50_us = 0, p99_us = 0;
  int64_t wrong = 0, errors = 0;
  Cycle cycle;
};

// Collects every batch's stage times while a mode is measured: per-stage
// means, how many lanes were busy at once, and a timeline for --timeline.
class StageObserver final : public Observer {
 public:
  struct Batch {
    int lane;
    double start_s, busy_s, pack_s, h2d_s, compute_s, d2h_s;
    int32_t requests;
  };
  void OnBatchDone(int lane, const BatchKey&, int32_t requests, int64_t, int64_t,
                   const BatchStats& st, absl::Duration busy) override {
    if (!recording_.load(std::memory_order_relaxed)) return;
    const absl::Time now = absl::Now();
    const double b = absl::ToDoubleSeconds(busy);
    absl::MutexLock lock(&mu_);
    const double end = absl::ToDoubleSeconds(now - origin_);
    batches_.push_back({lane, end - b, b, st.pack_seconds, st.h2d_seconds, st.compute_seconds,
                        st.d2h_seconds, requests});
  }
  void Start() {
    absl::MutexLock lock(&mu_);
    batches_.clear();
    origin_ = absl::Now();
    recording_ = true;
  }
  std::vector<Batch> Stop() {
    recording_ = false;
    absl::MutexLock lock(&mu_);
    return std::move(batches_);
  }

 private:
  std::atomic<bool> recording_{false};
  absl::Mutex mu_;
  absl::Time origin_ ABSL_GUARDED_BY(mu_);
  std::vector<Batch> batches_ ABSL_GUARDED_BY(mu_);
};

// One line: mean requests and per-stage microseconds per batch, and the
// mean number of lanes busy at once (sum of busy time over the wall time).
std::string StageSummary(const std::vector<StageObserver::Batch>& v, double wall_s) {
  if (v.empty()) return "no batches";
  double req = 0, busy = 0, pack = 0, h2d = 0, comp = 0, d2h = 0;
  for (const auto& b : v) {
    req += b.requests;
    busy += b.busy_s;
    pack += b.pack_s;
    h2d += b.h2d_s;
    comp += b.compute_s;
    d2h += b.d2h_s;
  }
  const double n = static_cast<double>(v.size());
  return absl::StrFormat(
      "batches %d, req/batch %.1f, us/batch: busy %.0f = pack+unpack %.0f, h2d %.0f, "
      "kernel %.0f, d2h %.0f, other %.0f; lanes busy at once %.2f",
      v.size(), req / n, 1e6 * busy / n, 1e6 * pack / n, 1e6 * h2d / n, 1e6 * comp / n,
      1e6 * d2h / n, 1e6 * (busy - pack - h2d - comp - d2h) / n, busy / wall_s);
}

// A backend that computes nothing and returns at once, with as many lanes
// as the gpu backend: what is left of a closed-loop cycle is the
// scheduler's and the threads' own hand-offs. Outputs are not written.
// Thread-safe (no state).
class NoopBackend final : public Backend {
 public:
  explicit NoopBackend(int lanes) : lanes_(lanes) {}
  const char* name() const override { return "noop"; }
  std::vector<std::string> devices() const override { return {"noop"}; }
  int num_lanes() const override { return lanes_; }
  absl::Status RunBatch(int, const BatchKey&, absl::Span<ConvSegment* const>,
                        BatchStats*) override {
    return absl::OkStatus();
  }

 private:
  const int lanes_;
};

// Runs one mode on `backend`; with `check`, every submitter's first answer
// is compared with the CPU answer.
Result RunMode(Backend* backend, const Workload& w, std::vector<InputSet>& sets,
               int32_t max_batch_requests, bool host_memory, bool check, int submitters,
               StageObserver* stages,
               std::vector<StageObserver::Batch>* timeline) {
  SchedulerOptions so;
  so.max_batch_requests = max_batch_requests;
  so.max_queued_requests = 1 << 16;
  so.completion_threads = absl::GetFlag(FLAGS_completion_threads);
  so.completion_chunk = absl::GetFlag(FLAGS_completion_chunk);
  if (max_batch_requests > 1) {
    so.max_queue_delay_us = absl::GetFlag(FLAGS_max_queue_delay_us);
    so.max_batch_bytes = absl::GetFlag(FLAGS_max_batch_bytes);
  }
  auto sched = Scheduler::Create(so, backend, Clock::Real(), stages);
  if (!sched.ok()) {
    std::fprintf(stderr, "%s\n", sched.status().ToString().c_str());
    std::exit(1);
  }
  const BatchKey key = KeyOf(w);
  // Session workloads: one state slot per submitter, from the backend (host
  // memory where it keeps none).
  std::unique_ptr<StateSlots> slots;
  if (w.slots) {
    StateSlotsOptions so_slots;
    so_slots.slot_bytes = sets[0].buffers.conv_state.size();
    so_slots.num_slots = submitters;
    absl::StatusOr<std::unique_ptr<StateSlots>> made = backend->CreateStateSlots(so_slots);
    if (!made.ok() && absl::IsUnimplemented(made.status())) {
      absl::StatusOr<std::unique_ptr<HostStateSlots>> host = HostStateSlots::Create(so_slots);
      if (host.ok()) made = std::unique_ptr<StateSlots>(std::move(*host));
    }
    if (!made.ok()) {
      std::fprintf(stderr, "state slots: %s\n", made.status().ToString().c_str());
      std::exit(1);
    }
    slots = std::move(*made);
  }
  std::atomic<int> phase{0};  // 0 warm-up, 1 measure, 2 stop
  std::atomic<int64_t> wrong{0}, errors{0};
  std::vector<std::vector<double>> lat(submitters);
  std::vector<int64_t> done(submitters, 0);
  std::vector<Cycle> cycles(submitters);
  std::vector<std::thread> threads;
  for (int s = 0; s < submitters; ++s) {
    threads.emplace_back([&, s] {
      InputSet& in = sets[s % sets.size()];
      ConvBuffers mine = in.buffers;  // own outputs, same inputs
      ConvSegment seg = mine.Segment();
      seg.x = in.buffers.Segment().x;  // read the shared inputs in place
      if (w.op == Op::kBackward) seg.dout = in.buffers.Segment().dout;
      if (w.states) seg.initial_states = in.buffers.Segment().initial_states;
      if (w.op == Op::kUpdate) seg.conv_state = in.buffers.Segment().conv_state;
      if (slots != nullptr) {
        // The state lives in this submitter's slot and advances in place.
        const std::vector<uint8_t>& init = in.buffers.conv_state;
        if (!slots->Write(s, 0, init.data(), static_cast<int64_t>(init.size())).ok()) {
          errors.fetch_add(1);
        }
        seg.conv_state.data = slots->SlotData(s);
        seg.conv_state.where = slots->SlotPlacement(s);
        seg.conv_state_out.data = slots->SlotData(s);
        seg.conv_state_out.where = seg.conv_state.where;
      }
      // Host-memory mode: inputs and outputs live in the backend's host
      // buffers; outputs are copied back to `mine` only for the check.
      std::shared_ptr<void> host_y, host_dx, host_final, host_state_out;
      if (host_memory) {
        seg.x.data = in.host_x.get();
        seg.x.where.kind = in.host_kind;
        if (seg.dout.present()) seg.dout.data = in.host_dout.get();
        if (seg.initial_states.present()) seg.initial_states.data = in.host_init.get();
        if (seg.conv_state.present()) seg.conv_state.data = in.host_init.get();
        for (TensorView* v : {&seg.dout, &seg.initial_states, &seg.conv_state}) {
          v->where.kind = in.host_kind;
        }
        auto out = [&](OutputView& v, std::shared_ptr<void>& keep) {
          if (!v.present()) return;
          HostBuffer buffer = HostAlloc(backend, v.bytes);
          keep = buffer.data;
          v.data = keep.get();
          v.where.kind = buffer.kind;
        };
        out(seg.y, host_y);
        out(seg.dx, host_dx);
        out(seg.final_states, host_final);
        if (slots == nullptr) out(seg.conv_state_out, host_state_out);
      }
      auto copy_back = [&] {
        if (!host_memory) return;
        if (host_y) std::memcpy(mine.y.data(), host_y.get(), mine.y.size());
        if (host_dx) std::memcpy(mine.dx.data(), host_dx.get(), mine.dx.size());
        if (host_state_out) {
          std::memcpy(mine.conv_state_out.data(), host_state_out.get(), mine.conv_state_out.size());
        }
      };
      if (w.registered) {
        seg.weight.owner = seg.bias.owner = in.weight_owner;
        seg.weight.data = in.buffers.weight.data();
        seg.bias.data = in.buffers.bias.data();
        seg.weight.cache_id = 1000 + 2 * (s % sets.size());
        seg.bias.cache_id = seg.weight.cache_id + 1;
      }
      // Each answer wakes this thread through one futex word, set by on_done
      // (std::atomic wait/notify): no mutex is taken on either side.
      std::atomic<uint32_t> answered{0};
      bool checked = !check;  // nothing to poison or compare when not checking
      absl::Time last_wake = absl::InfinitePast();
      while (phase.load() < 2) {
        if (!checked) {
          std::fill(mine.y.begin(), mine.y.end(), 0xff);
          std::fill(mine.dx.begin(), mine.dx.end(), 0xff);
          if (host_y) std::memset(host_y.get(), 0xff, mine.y.size());
          if (host_dx) std::memset(host_dx.get(), 0xff, mine.dx.size());
          std::fill(mine.conv_state_out.begin(), mine.conv_state_out.end(), 0xff);
          if (host_state_out) std::memset(host_state_out.get(), 0xff, mine.conv_state_out.size());
        }
        auto task = std::make_unique<Task>();
        task->key = key;
        task->segment = seg;
        answered.store(0, std::memory_order_relaxed);
        absl::Status outcome;
        TaskTimings timings;
        absl::Time done_at;
        task->on_done = [&](const absl::Status& st, const TaskTimings& t) {
          outcome = st;
          timings = t;
          done_at = absl::Now();
          answered.store(1, std::memory_order_release);
          answered.notify_one();
        };
        const absl::Time t0 = absl::Now();
        absl::Status st = (*sched)->Submit(&task);
        if (!st.ok()) {
          errors.fetch_add(1);
          continue;
        }
        while (answered.load(std::memory_order_acquire) == 0) answered.wait(0);
        const absl::Time woke = absl::Now();
        const double us = absl::ToDoubleMicroseconds(woke - t0);
        if (phase.load() == 1 && last_wake != absl::InfinitePast()) {
          // Consecutive instants of this request, kSubmit .. kWake between
          // them; kNext is the stretch before, from the previous answer.
          const absl::Time at[Cycle::kNext + 1] = {t0, timings.enqueued, timings.batch_start,
                                                   timings.batch_end, done_at, woke};
          Cycle& c = cycles[s];
          for (int k = 0; k < Cycle::kNext; ++k) {
            c.seconds[k] += absl::ToDoubleSeconds(at[k + 1] - at[k]);
          }
          c.seconds[Cycle::kNext] += absl::ToDoubleSeconds(t0 - last_wake);
          ++c.n;
        }
        last_wake = woke;
        if (!outcome.ok()) errors.fetch_add(1);
        if (!checked) {
          checked = true;
          copy_back();
          if (slots != nullptr &&
              !slots->Read(s, 0, mine.conv_state_out.data(),
                           static_cast<int64_t>(mine.conv_state_out.size()))
                   .ok()) {
            errors.fetch_add(1);
          }
          const bool ok =
              w.op == Op::kForward  ? Close(w.dtype, mine.y, in.buffers.y)
              : w.op == Op::kUpdate ? Close(w.dtype, mine.y, in.buffers.y) &&
                                          Close(w.dtype, mine.conv_state_out,
                                                in.buffers.conv_state_out)
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
  stages->Start();
  const absl::Time start = absl::Now();
  absl::SleepFor(absl::Seconds(absl::GetFlag(FLAGS_duration_s)));
  phase = 2;
  const double secs = absl::ToDoubleSeconds(absl::Now() - start);
  *timeline = stages->Stop();
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
  const int64_t moved = static_cast<int64_t>(
      b.x.size() + b.dout.size() + b.initial_states.size() + b.conv_state.size() + b.y.size() +
      b.dx.size() + b.final_states.size() + b.conv_state_out.size());
  r.gbps = r.rps * moved / 1e9;
  if (!all.empty()) {
    r.p50_us = all[all.size() / 2];
    r.p99_us = all[std::min(all.size() - 1, all.size() * 99 / 100)];
  }
  r.wrong = wrong.load();
  r.errors = errors.load();
  for (const Cycle& c : cycles) r.cycle.Add(c);
  return r;
}

// Bytes a lane copies in and out for one request of `w`.
void CopyBytes(const Workload& w, const ConvBuffers& b, int64_t* in, int64_t* out) {
  // Session states stay on the device: they cross no bus.
  const int64_t state_in = w.slots ? 0 : b.conv_state.size();
  const int64_t state_out = w.slots ? 0 : b.conv_state_out.size();
  *in = b.x.size() + b.dout.size() + b.initial_states.size() + state_in +
        (w.registered ? 0 : b.weight.size() + b.bias.size());
  *out = b.y.size() + b.dx.size() + b.final_states.size() + state_out +
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

// Host memcpy bandwidth from pageable memory into pinned memory (what
// packing does), with `threads` threads each copying its share of 256 MiB;
// GB/s of bytes copied, median of 5.
double HostCopyGBps(int threads) {
  const int64_t bytes = int64_t{256} << 20;
  std::vector<char> src(bytes, 1);
  void* dst = nullptr;
  gpu::PinnedAlloc(&dst, bytes);
  std::memset(dst, 0, bytes);
  std::vector<double> times;
  for (int rep = 0; rep < 6; ++rep) {
    const absl::Time t0 = absl::Now();
    std::vector<std::thread> ts;
    const int64_t share = bytes / threads;
    for (int t = 0; t < threads; ++t) {
      ts.emplace_back([&, t] {
        std::memcpy(static_cast<char*>(dst) + t * share, src.data() + t * share, share);
      });
    }
    for (auto& t : ts) t.join();
    if (rep > 0) times.push_back(absl::ToDoubleSeconds(absl::Now() - t0));
  }
  gpu::PinnedFree(dst);
  std::sort(times.begin(), times.end());
  return bytes / times[times.size() / 2] / 1e9;
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
  go.host_pool_bytes = absl::GetFlag(FLAGS_host_pool_bytes);
  go.gather_small_host_tensors = absl::GetFlag(FLAGS_gather_small_host_tensors);
  go.in_place_host_tensors = absl::GetFlag(FLAGS_in_place_host_tensors);
  go.direct_copy_bytes = absl::GetFlag(FLAGS_direct_copy_bytes);
  go.shared_copy_streams = absl::GetFlag(FLAGS_shared_copy_streams);
  go.shared_copy_min_bytes = absl::GetFlag(FLAGS_shared_copy_min_bytes);
  go.batch_copies = absl::GetFlag(FLAGS_batch_copies);
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
  csv << "mode,workload,submitters,throughput_rps,gbps,pct_of_pinned_copy,p50_us,p99_us,"
         "request_memory\n";
  std::printf("device: %s, lanes/device %d, submitters %d\n", device.c_str(),
              go.lanes_per_device, submitters);
  std::printf("%-8s %-11s %-9s %10s %8s %8s %10s %10s %6s\n", "mode", "workload", "memory",
              "req/s", "GB/s", "%copy", "p50_us", "p99_us", "wrong");
  std::printf("host memcpy into pinned memory: 1 thread %.1f GB/s, 4 threads %.1f GB/s, "
              "16 threads %.1f GB/s\n", HostCopyGBps(1), HostCopyGBps(4), HostCopyGBps(16));
  int64_t wrong_total = 0, errors_total = 0;
  StageObserver stages;
  std::vector<std::string> stage_lines;
  std::ofstream timeline_csv;
  if (!absl::GetFlag(FLAGS_timeline).empty()) {
    timeline_csv.open(absl::GetFlag(FLAGS_timeline));
    timeline_csv << "mode,workload,lane,start_us,busy_us,pack_unpack_us,h2d_us,kernel_us,d2h_us,"
                    "requests\n";
  }
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
      if (w.op == Op::kUpdate) {
        b.state_len = 3;  // W - 1
        b.conv_state = Random(w.dtype, w.b * w.d * b.state_len, rng);
      } else if (w.states) {
        b.initial_states = Random(w.dtype, w.b * w.d * 3, rng);
      }
      if (!RunCpuConv(&b, pool->get()).ok()) return 1;
      set.weight_owner = std::make_shared<int>(0);
      set.host_x = HostCopy(gpu->get(), b.x, &set.host_kind);
      MemoryKind unused;  // same pool: the kind of x's buffer stands for all
      set.host_dout = HostCopy(gpu->get(), b.dout, &unused);
      set.host_init =
          HostCopy(gpu->get(), w.op == Op::kUpdate ? b.conv_state : b.initial_states, &unused);
    }
    int64_t in = 0, outb = 0;
    CopyBytes(w, sets[0].buffers, &in, &outb);
    // The ceiling is measured before the first mode and after every mode;
    // rows use the median, so one slow or fast moment of a shared machine
    // does not set every percentage of the workload.
    std::vector<double> ceilings = {PinnedCopySecondsPerRequest(in, outb, 64)};
    struct Row {
      const char* mode;
      const char* memory;
      Result r;
    };
    std::vector<Row> rows;
    for (const auto& [mode, max_req, host_memory] :
         {std::tuple<const char*, int, bool>{"fused", 64, true}, {"unfused", 1, true},
          {"fused", 64, false}, {"unfused", 1, false}}) {
      const char* memory = host_memory ? "host-pool" : "heap";
      if (absl::GetFlag(FLAGS_request_memory) != "both" &&
          absl::GetFlag(FLAGS_request_memory) != memory) {
        continue;
      }
      std::vector<StageObserver::Batch> timeline;
      const Result r = RunMode(gpu->get(), w, sets, max_req, host_memory, /*check=*/true,
                               submitters, &stages, &timeline);
      ceilings.push_back(PinnedCopySecondsPerRequest(in, outb, 64));
      rows.push_back({mode, memory, r});
      stage_lines.push_back(absl::StrCat(mode, " ", w.name, " ", memory, ": ",
                                         StageSummary(timeline, absl::GetFlag(FLAGS_duration_s))));
      stage_lines.push_back(absl::StrCat("    ", r.cycle.Summary()));
      if (timeline_csv.is_open()) {
        const size_t keep = std::min<size_t>(timeline.size(),
                                             absl::GetFlag(FLAGS_timeline_batches));
        for (const auto& b : absl::MakeConstSpan(timeline).subspan(0, keep)) {
          timeline_csv << mode << "," << w.name << "," << b.lane << "," << b.start_s * 1e6 << ","
                       << b.busy_s * 1e6 << "," << b.pack_s * 1e6 << "," << b.h2d_s * 1e6 << ","
                       << b.compute_s * 1e6 << "," << b.d2h_s * 1e6 << "," << b.requests << "\n";
        }
      }
    }
    if (absl::GetFlag(FLAGS_noop_rows)) {
      NoopBackend noop((*gpu)->num_lanes());
      for (const auto& [mode, max_req] :
           {std::pair<const char*, int>{"noop-fused", 64}, {"noop-unfused", 1}}) {
        std::vector<StageObserver::Batch> timeline;
        const Result r = RunMode(&noop, w, sets, max_req, /*host_memory=*/false,
                                 /*check=*/false, submitters, &stages, &timeline);
        rows.push_back({mode, "heap", r});
        stage_lines.push_back(absl::StrCat(mode, " ", w.name, ": ",
                                           StageSummary(timeline, absl::GetFlag(FLAGS_duration_s))));
        stage_lines.push_back(absl::StrCat("    ", r.cycle.Summary()));
      }
    }
    std::vector<double> sorted = ceilings;
    std::sort(sorted.begin(), sorted.end());
    const double copy_s = sorted[sorted.size() / 2];
    for (const Row& row : rows) {
      const Result& r = row.r;
      const double pct = 100.0 * r.rps * copy_s;
      std::printf("%-8s %-11s %-9s %10.0f %8.2f %8.1f %10.0f %10.0f %6lld\n", row.mode,
                  w.name.c_str(), row.memory, r.rps, r.gbps, pct, r.p50_us, r.p99_us,
                  static_cast<long long>(r.wrong));
      csv << row.mode << "," << w.name << "," << submitters << "," << r.rps << "," << r.gbps
          << "," << pct << "," << r.p50_us << "," << r.p99_us << "," << row.memory << "\n";
      wrong_total += r.wrong;
      errors_total += r.errors;
    }
    std::printf("  %s pinned-copy ceiling: %.0f req/s (median of %zu, range %.0f..%.0f)\n",
                w.name.c_str(), 1.0 / copy_s, sorted.size(), 1.0 / sorted.back(),
                1.0 / sorted.front());
    std::fflush(stdout);
  }
  std::printf("\nstages per batch (BatchStats of every measured batch):\n");
  for (const auto& line : stage_lines) std::printf("  %s\n", line.c_str());
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
