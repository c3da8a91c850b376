#include "client/load/load_runner.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/load/prom_scrape.h"
#include "client/verify.h"

namespace conv1d {

namespace {
constexpr int kMaxVerifyQueue = 16;

int64_t EstimateRequestBytes(const WorkloadSpec& s) {
  const int64_t act = s.batch * s.dim * s.seqlen * DTypeSize(s.dtype);
  return s.op == WorkloadOp::kBackward ? 2 * act : act;
}
}  // namespace

absl::StatusOr<std::unique_ptr<LoadRunner>> LoadRunner::Create(LoadOptions options,
                                                               Conv1dClient* client) {
  if (options.workloads.empty()) return absl::InvalidArgumentError("no workload");
  if (options.levels.empty()) return absl::InvalidArgumentError("no levels");
  if (!(options.duration_s > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("--duration_s: ", options.duration_s,
                                                   " must be > 0"));
  }
  if (!(options.window_s >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat("--window_s: ", options.window_s,
                                                   " must be >= 0 (0: duration / stable windows)"));
  }
  if (options.stable_windows < 1) options.stable_windows = 1;
  if (options.window_s == 0) options.window_s = options.duration_s / options.stable_windows;
  // The small slack keeps 0.6 / 0.2 from rounding up to a fourth window.
  const int min_windows =
      std::max(1, static_cast<int>(std::ceil(options.duration_s / options.window_s - 1e-9)));
  options.max_trials = std::max({options.max_trials, options.stable_windows, min_windows});
  if (options.verify_fraction > 0 && !ReferenceAvailable()) {
    return absl::FailedPreconditionError("--verify_fraction needs a build with the CPU backend");
  }
  if (options.max_behind_ms < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--max_behind_ms: ", options.max_behind_ms,
                                                   " must be >= 0 (0: never)"));
  }
  if (options.search && !(options.search_p99_ms > 0)) {
    return absl::InvalidArgumentError("--search needs --search_p99_ms > 0");
  }
  if (options.search && options.search_bisections < 0) {
    return absl::InvalidArgumentError("--search_steps must be >= 0");
  }
  if (!options.schedule_s.empty() && options.closed_loop) {
    return absl::InvalidArgumentError("a schedule is open loop: no --concurrency with it");
  }
  const bool inputs = !options.input_x.empty() || !options.input_dout.empty() ||
                      !options.input_state.empty();
  if (inputs && options.workloads.size() != 1) {
    return absl::InvalidArgumentError("input files need a single workload (no --mix)");
  }
  for (double l : options.levels) {
    if (options.closed_loop && (l < 1 || l != std::floor(l))) {
      return absl::InvalidArgumentError(absl::StrCat("concurrency ", l, " is not a whole number >= 1"));
    }
  }
  std::unique_ptr<LoadRunner> r(new LoadRunner(std::move(options), client));
  r->min_windows_ = std::max(min_windows, r->options_.stable_windows);
  r->call_.timeout = r->options_.timeout;
  r->call_.max_attempts = r->options_.max_attempts;
  return r;
}

LoadRunner::~LoadRunner() {
  {
    absl::MutexLock l(&verify_mu_);
    verify_stop_ = true;
  }
  if (verifier_.joinable()) verifier_.join();
}

absl::Status LoadRunner::Setup(RunReport* report) {
  absl::StatusOr<v1::ServerInfoResponse> info = client_->ServerInfo();
  ++report->setup_calls;
  if (!info.ok()) {
    return absl::Status(info.status().code(),
                        absl::StrCat("server not reachable: ", info.status().message()));
  }
  std::printf("server: %s backend, version %s\n", info->backend().c_str(), info->version().c_str());
  const auto& w = options_.workloads;
  const uint64_t seed = options_.seed;
  // Pool: each workload gets up to pool_size requests within its share of the
  // byte budget, built in parallel so large pools do not stall start-up.
  std::vector<int> sizes;
  for (size_t i = 0; i < w.size(); ++i) {
    weights_.push_back(MakeWeights(w[i], seed * 1000003 + i));
    const int64_t budget = options_.pool_bytes / static_cast<int64_t>(w.size());
    const int64_t fit = budget / std::max<int64_t>(1, EstimateRequestBytes(w[i]));
    sizes.push_back(static_cast<int>(std::clamp<int64_t>(fit, 2, std::max(2, options_.pool_size))));
  }
  for (size_t i = 0; i < w.size(); ++i) {
    if (!w[i].registered_weights) {
      registered_names_.push_back("");
      continue;
    }
    std::string name = w[i].weights_name;
    if (name.empty()) {
      name = absl::StrCat("conv1d_load_", getpid(), "_", i);
      v1::RegisterWeightsRequest req;
      req.set_name(name);
      req.set_replace(true);
      weights_[i].weight.ToProto(req.mutable_weight());
      if (!weights_[i].bias.empty()) weights_[i].bias.ToProto(req.mutable_bias());
      absl::StatusOr<v1::RegisterWeightsResponse> r = client_->RegisterWeights(req);
      ++report->setup_calls;
      if (!r.ok()) {
        return absl::Status(r.status().code(),
                            absl::StrCat("registering weights: ", r.status().message()));
      }
      registered_names_.push_back(name);
    } else {
      registered_names_.push_back("");  // the user's set: values unknown here
    }
  }
  std::vector<std::vector<PoolItem>> per(w.size());
  for (size_t i = 0; i < w.size(); ++i) per[i].resize(sizes[i]);
  std::vector<std::thread> threads;
  const unsigned nthreads = std::max(1u, std::thread::hardware_concurrency());
  for (unsigned t = 0; t < nthreads; ++t) {
    threads.emplace_back([&, t] {
      size_t k = 0;
      for (size_t i = 0; i < w.size(); ++i) {
        WorkloadSpec spec = w[i];
        if (spec.registered_weights && spec.weights_name.empty()) {
          spec.weights_name = registered_names_[i];
        }
        for (int j = 0; j < sizes[i]; ++j, ++k) {
          if (k % nthreads != t) continue;
          PoolItem& item = per[i][j];
          item.workload = static_cast<int>(i);
          item.req = BuildRequest(spec, weights_[i], seed * 7919 + 104729 * i + 31 * j + 5);
          item.req.spec_index = static_cast<int>(i);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  if (!options_.input_x.empty() || !options_.input_dout.empty() ||
      !options_.input_state.empty()) {
    // The files' arrays replace the random ones; every request is the same.
    per[0].resize(1);
    PreparedRequest& p = per[0][0].req;
    const HostTensor &x = options_.input_x, &dout = options_.input_dout,
                     &state = options_.input_state;
    if (p.forward) {
      auto m = std::make_shared<v1::ForwardRequest>(*p.forward);
      if (!x.empty()) x.ToProto(m->mutable_x());
      if (!state.empty()) state.ToProto(m->mutable_initial_states());
      p.forward = std::move(m);
    } else if (p.backward) {
      auto m = std::make_shared<v1::BackwardRequest>(*p.backward);
      if (!x.empty()) x.ToProto(m->mutable_x());
      if (!dout.empty()) dout.ToProto(m->mutable_dout());
      if (!state.empty()) state.ToProto(m->mutable_initial_states());
      p.backward = std::move(m);
    } else if (p.update) {
      auto m = std::make_shared<v1::UpdateRequest>(*p.update);
      if (!x.empty()) x.ToProto(m->mutable_x());
      if (!state.empty()) state.ToProto(m->mutable_conv_state());
      p.update = std::move(m);
    }
    sizes[0] = 1;
  }
  std::vector<int> first;
  for (size_t i = 0; i < w.size(); ++i) {
    first.push_back(static_cast<int>(pool_.size()));
    for (auto& item : per[i]) pool_.push_back(std::move(item));
  }
  // Schedule: mix shares over 4096 slots, then shuffled deterministically.
  double total = 0;
  for (const auto& s : w) total += s.mix_weight;
  FastRng rng(seed ^ 0x5eed);
  std::vector<int> rr(w.size(), 0);
  for (int k = 0; k < 4096; ++k) {
    double u = rng.UniformDouble() * total;
    size_t i = 0;
    while (i + 1 < w.size() && u >= w[i].mix_weight) u -= w[i++].mix_weight;
    schedule_.push_back(first[i] + (rr[i]++ % sizes[i]));
  }
  int64_t pool_bytes = 0;
  for (const auto& item : pool_) pool_bytes += item.req.request_tensor_bytes;
  std::printf("request pool: %zu requests, %.1f MB\n", pool_.size(), pool_bytes / 1e6);
  if (options_.verify_fraction > 0) verifier_ = std::thread([this] { VerifierLoop(); });
  return absl::OkStatus();
}

void LoadRunner::Teardown() {
  for (const std::string& name : registered_names_) {
    if (name.empty()) continue;
    v1::UnregisterWeightsRequest req;
    req.set_name(name);
    static_cast<void>(client_->UnregisterWeights(req));
  }
}

const LoadRunner::PoolItem& LoadRunner::NextItem() {
  const uint64_t k = next_.fetch_add(1, std::memory_order_relaxed);
  return pool_[schedule_[k % schedule_.size()]];
}

std::unique_ptr<WindowStats> LoadRunner::NewWindow() const {
  auto w = std::make_unique<WindowStats>();
  w->by_workload.resize(options_.workloads.size());
  return w;
}

template <typename Resp>
void LoadRunner::OnComplete(const PoolItem& item, absl::Time t0, absl::StatusOr<Resp> r) {
  const double latency_us = absl::ToDoubleMicroseconds(absl::Now() - t0);
  {
    absl::MutexLock l(&mu_);
    ++completed_;
    if (!r.ok()) ++errors_;
    if (window_ != nullptr) {
      WorkloadCounts& wc = window_->by_workload[item.workload];
      ++window_->completed;
      ++wc.completed;
      if (r.ok()) {
        const int64_t bytes = item.req.request_tensor_bytes + TensorPayloadBytes(*r);
        window_->latencies_us.push_back(latency_us);
        window_->bytes += bytes;
        wc.latencies_us.push_back(latency_us);
        wc.bytes += bytes;
      } else {
        const std::string code = absl::StatusCodeToString(r.status().code());
        ++window_->errors;
        ++window_->errors_by_code[code];
        ++wc.errors;
        ++wc.errors_by_code[code];
      }
    }
  }
  if (!r.ok() || options_.verify_fraction <= 0) return;
  thread_local FastRng rng(reinterpret_cast<uintptr_t>(&rng) ^ options_.seed);
  if (rng.UniformDouble() >= options_.verify_fraction) return;
  const WorkloadSpec& spec = options_.workloads[item.workload];
  const WeightSet* weights = spec.registered_weights ? &weights_[item.workload] : nullptr;
  absl::MutexLock l(&verify_mu_);
  if (spec.registered_weights && registered_names_[item.workload].empty()) {
    ++verify_skipped_;  // a user-registered set: values unknown here
    return;
  }
  if (verify_queue_.size() >= kMaxVerifyQueue) {
    ++verify_skipped_;
    return;
  }
  verify_queue_.push_back([this, &item, weights, resp = *std::move(r)]() {
    absl::Status s;
    if constexpr (std::is_same_v<Resp, v1::ForwardResponse>) {
      s = VerifyResponse(*item.req.forward, resp, weights);
    } else if constexpr (std::is_same_v<Resp, v1::BackwardResponse>) {
      s = VerifyResponse(*item.req.backward, resp, weights);
    } else {
      s = VerifyResponse(*item.req.update, resp, weights);
    }
    absl::MutexLock l(&verify_mu_);
    ++verified_;
    if (!s.ok()) {
      ++wrong_;
      if (first_wrong_.empty()) first_wrong_ = s.ToString();
    }
  });
}

void LoadRunner::VerifierLoop() {
  for (;;) {
    absl::AnyInvocable<void()> task;
    {
      absl::MutexLock l(&verify_mu_);
      verify_mu_.Await(absl::Condition(
          +[](LoadRunner* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(r->verify_mu_) {
            return r->verify_stop_ || !r->verify_queue_.empty();
          },
          this));
      if (verify_queue_.empty()) return;
      task = std::move(verify_queue_.front());
      verify_queue_.pop_front();
      ++verify_busy_;
    }
    task();
    absl::MutexLock l(&verify_mu_);
    --verify_busy_;
  }
}

void LoadRunner::Dispatch(const PoolItem& item, absl::AnyInvocable<void()> after) {
  const absl::Time t0 = absl::Now();
  switch (item.req.op) {
    case WorkloadOp::kForward:
      client_->ForwardAsync(item.req.forward, call_,
                            [this, &item, t0, after = std::move(after)](
                                absl::StatusOr<v1::ForwardResponse> r) mutable {
                              OnComplete(item, t0, std::move(r));
                              after();
                            });
      break;
    case WorkloadOp::kBackward:
      client_->BackwardAsync(item.req.backward, call_,
                             [this, &item, t0, after = std::move(after)](
                                 absl::StatusOr<v1::BackwardResponse> r) mutable {
                               OnComplete(item, t0, std::move(r));
                               after();
                             });
      break;
    case WorkloadOp::kUpdate:
      client_->UpdateAsync(item.req.update, call_,
                           [this, &item, t0, after = std::move(after)](
                               absl::StatusOr<v1::UpdateResponse> r) mutable {
                             OnComplete(item, t0, std::move(r));
                             after();
                           });
      break;
  }
}

void LoadRunner::IssueClosed() {
  {
    absl::MutexLock l(&mu_);
    ++sent_;
  }
  Dispatch(NextItem(), [this] {
    if (running_.load(std::memory_order_acquire)) {
      IssueClosed();
    } else {
      absl::MutexLock l(&mu_);
      --outstanding_;
    }
  });
}

void LoadRunner::SenderLoop(double rate, StepResult* step) {
  FastRng rng(options_.seed * 31 + static_cast<uint64_t>(rate));
  const absl::Duration late = absl::Microseconds(options_.late_us);
  const absl::Duration max_behind = absl::Microseconds(options_.max_behind_ms * 1e3);
  const std::vector<double>& schedule = options_.schedule_s;
  // A repeated schedule restarts one mean gap after its last send.
  const double span_s =
      schedule.size() < 2
          ? 0
          : schedule.back() + (schedule.back() - schedule.front()) / (schedule.size() - 1);
  const absl::Time start = absl::Now();
  size_t sent = 0;
  absl::Time next = schedule.empty() ? start : start + absl::Seconds(schedule[0]);
  while (running_.load(std::memory_order_acquire)) {
    absl::Duration wait = next - absl::Now();
    if (wait > absl::Microseconds(200)) absl::SleepFor(wait - absl::Microseconds(100));
    while (absl::Now() < next) std::this_thread::yield();
    {
      absl::MutexLock l(&mu_);
      auto can_send = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return outstanding_ < options_.max_outstanding || !running_.load();
      };
      while (!can_send()) mu_.AwaitWithTimeout(absl::Condition(&can_send), absl::Milliseconds(50));
      if (!running_.load()) break;
      ++outstanding_;
      ++sent_;
    }
    const absl::Duration behind = absl::Now() - next;
    if (behind > late) {
      ++step->late_sends;
      step->max_late_us = std::max(step->max_late_us, absl::ToDoubleMicroseconds(behind));
    }
    Dispatch(NextItem(), [this] {
      absl::MutexLock l(&mu_);
      --outstanding_;
    });
    if (max_behind > absl::ZeroDuration() && behind > max_behind) {
      // The server (or this host) cannot keep up: measuring on would only
      // grow the queue. RunStep sees the flag and ends the step.
      overloaded_.store(true, std::memory_order_release);
      break;
    }
    ++sent;
    if (!schedule.empty()) {
      const size_t round = sent / schedule.size();
      next = start + absl::Seconds(round * span_s + schedule[sent % schedule.size()]);
    } else {
      const double gap_s =
          options_.poisson ? -std::log(1.0 - rng.UniformDouble()) / rate : 1.0 / rate;
      next += absl::Seconds(gap_s);
    }
  }
}

LoadRunner::Scrape LoadRunner::DoScrape() {
  Scrape s;
  absl::StatusOr<std::string> body = absl::NotFoundError("no --metrics_url");
  if (!options_.metrics_url.empty()) {
    body = HttpGet(options_.metrics_url, absl::Seconds(5));
    if (!body.ok()) {
      std::fprintf(stderr, "conv1d_load: metrics scrape failed: %s\n",
                   body.status().ToString().c_str());
    }
  }
  if (!options_.gpu_metrics_url.empty()) {
    absl::StatusOr<std::string> gpu_body =
        options_.gpu_metrics_url == options_.metrics_url
            ? body
            : HttpGet(options_.gpu_metrics_url, absl::Seconds(5));
    if (gpu_body.ok()) {
      int n = 0;
      const double util = SumMetric(*gpu_body, options_.gpu_util_metric, "", &n);
      if (n > 0) s.gpu.util_sum = util / n, s.gpu.util_n = 1;
      const double power = SumMetric(*gpu_body, options_.gpu_power_metric, "", &n);
      if (n > 0) s.gpu.power_sum = power / n, s.gpu.power_n = 1;
      const double mem = SumMetric(*gpu_body, options_.gpu_memory_metric, "", &n);
      if (n > 0) s.gpu.memory_sum = mem * options_.gpu_memory_unit_bytes, s.gpu.memory_n = 1;
    } else {
      std::fprintf(stderr, "conv1d_load: GPU metrics scrape failed: %s\n",
                   gpu_body.status().ToString().c_str());
    }
  }
  if (!body.ok()) return s;
  const std::string& f = options_.requests_filter;
  s.ok = true;
  s.queue_sum = SumMetric(*body, options_.queue_metric + "_sum");
  s.queue_count = SumMetric(*body, options_.queue_metric + "_count");
  s.compute_sum = SumMetric(*body, options_.compute_metric + "_sum");
  s.compute_count = SumMetric(*body, options_.compute_metric + "_count");
  s.requests = SumMetric(*body, options_.requests_metric, f);
  return s;
}

void LoadRunner::SleepWithProgress(double seconds, double level) {
  const absl::Time end = absl::Now() + absl::Seconds(seconds);
  const absl::Time start = absl::Now();
  while (absl::Now() < end && !overloaded_.load(std::memory_order_acquire)) {
    absl::SleepFor(std::min(absl::Milliseconds(options_.closed_loop ? 500 : 50),
                            end - absl::Now()));
    if (!options_.progress) continue;
    int64_t n, errors;
    bool measuring;
    std::vector<double> lat;
    {
      absl::MutexLock l(&mu_);
      measuring = window_ != nullptr;
      if (!measuring) {
        n = completed_, errors = errors_;
      } else {
        n = window_->completed, errors = window_->errors;
        lat = window_->latencies_us;
      }
    }
    std::sort(lat.begin(), lat.end());
    const double el = absl::ToDoubleSeconds(absl::Now() - start);
    std::printf("\r\033[K[%s %g] %s %.0f req/s  p99 %.1f us  errors %lld",
                options_.closed_loop ? "concurrency" : "rate", level,
                measuring ? "measuring" : "warm-up",
                measuring ? n / std::max(el, 1e-9) : 0.0, Percentile(lat, 99),
                static_cast<long long>(errors));
    std::fflush(stdout);
  }
}

StepResult LoadRunner::RunStep(double level) {
  StepResult step;
  step.closed_loop = options_.closed_loop;
  step.level = level;
  step.window_s = options_.window_s;
  step.schedule = !options_.schedule_s.empty();
  overloaded_.store(false, std::memory_order_release);
  int64_t sent0, completed0, errors0, verified0, wrong0, skipped0;
  {
    absl::MutexLock l(&mu_);
    sent0 = sent_, completed0 = completed_, errors0 = errors_;
  }
  {
    absl::MutexLock l(&verify_mu_);
    verified0 = verified_, wrong0 = wrong_, skipped0 = verify_skipped_;
  }
  running_.store(true, std::memory_order_release);
  std::thread sender;
  if (options_.closed_loop) {
    const int n = static_cast<int>(level);
    {
      absl::MutexLock l(&mu_);
      outstanding_ += n;
    }
    for (int i = 0; i < n; ++i) IssueClosed();
  } else {
    sender = std::thread([this, level, &step] { SenderLoop(level, &step); });
  }
  SleepWithProgress(options_.warmup_s, level);

  std::vector<WindowStats> windows;
  std::vector<double> rps, p99;
  Scrape before = DoScrape();
  {
    absl::MutexLock l(&mu_);
    window_ = NewWindow();
  }
  absl::Time window_start = absl::Now();
  for (int trial = 0; trial < options_.max_trials; ++trial) {
    SleepWithProgress(options_.window_s, level);
    Scrape after = DoScrape();
    std::unique_ptr<WindowStats> w;
    const absl::Time now = absl::Now();
    {
      absl::MutexLock l(&mu_);
      w = std::move(window_);
      if (trial + 1 < options_.max_trials) window_ = NewWindow();
    }
    w->duration_s = absl::ToDoubleSeconds(now - window_start);
    window_start = now;
    if (before.ok && after.ok) {
      w->server_queue_sum_s = after.queue_sum - before.queue_sum;
      w->server_queue_count = after.queue_count - before.queue_count;
      w->server_compute_sum_s = after.compute_sum - before.compute_sum;
      w->server_compute_count = after.compute_count - before.compute_count;
      w->server_requests = after.requests - before.requests;
    }
    w->gpu = after.gpu;
    before = after;
    std::vector<double> sorted = w->latencies_us;
    std::sort(sorted.begin(), sorted.end());
    rps.push_back(w->throughput_rps());
    p99.push_back(Percentile(sorted, 99));
    step.measured_s += w->duration_s;
    windows.push_back(std::move(*w));
    if (overloaded_.load(std::memory_order_acquire)) {
      step.overloaded = true;
      absl::MutexLock l(&mu_);
      window_.reset();
      break;
    }
    if (trial + 1 >= min_windows_ &&
        IsStable(rps, p99, options_.stable_windows, options_.stability_pct)) {
      step.stable = true;
      absl::MutexLock l(&mu_);
      window_.reset();
      break;
    }
  }
  running_.store(false, std::memory_order_release);
  if (sender.joinable()) sender.join();
  {
    // Drain: every call ends by its deadline at the latest.
    absl::MutexLock l(&mu_);
    auto drained = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return outstanding_ == 0; };
    mu_.AwaitWithTimeout(absl::Condition(&drained), options_.timeout + absl::Seconds(5));
  }
  {
    // Let sampled verifications of this step finish so they count here.
    absl::MutexLock l(&verify_mu_);
    auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(verify_mu_) {
      return verify_queue_.empty() && verify_busy_ == 0;
    };
    verify_mu_.AwaitWithTimeout(absl::Condition(&idle), absl::Seconds(120));
  }
  if (options_.progress) {
    std::printf("\r\033[K");
    std::fflush(stdout);
  }

  step.windows = static_cast<int>(windows.size());
  const bool scraped = !options_.metrics_url.empty();
  for (size_t i = 0; i < windows.size(); ++i) {
    WindowStats& w = windows[i];
    RowResult row;
    row.index = static_cast<int>(i);
    row.duration_s = w.duration_s;
    row.requests = w.completed;
    row.errors = w.errors;
    row.errors_by_code = w.errors_by_code;
    row.throughput_rps = w.throughput_rps();
    row.gbps = w.gbps();
    std::vector<double> lat = w.latencies_us;
    row.latency = Summarize(lat);
    if (scraped) {
      row.server_requests = w.server_requests;
      if (w.server_queue_count > 0) {
        row.server_queue_mean_us = 1e6 * w.server_queue_sum_s / w.server_queue_count;
      }
      if (w.server_compute_count > 0) {
        row.server_compute_mean_us = 1e6 * w.server_compute_sum_s / w.server_compute_count;
      }
    }
    if (w.gpu.util_n > 0) row.gpu_util_pct = w.gpu.util_sum / w.gpu.util_n;
    if (w.gpu.power_n > 0) row.gpu_power_w = w.gpu.power_sum / w.gpu.power_n;
    if (w.gpu.memory_n > 0) row.gpu_memory_bytes = w.gpu.memory_sum / w.gpu.memory_n;
    step.window_rows.push_back(std::move(row));
  }
  WindowStats merged;
  const size_t first = windows.size() > static_cast<size_t>(options_.stable_windows)
                           ? windows.size() - options_.stable_windows
                           : 0;
  for (size_t i = first; i < windows.size(); ++i) merged.Merge(windows[i]);
  step.requests = merged.completed;
  step.errors = merged.errors;
  step.errors_by_code = merged.errors_by_code;
  step.throughput_rps = merged.throughput_rps();
  step.gbps = merged.gbps();
  step.latency = Summarize(merged.latencies_us);
  for (size_t k = 0; k < merged.by_workload.size(); ++k) {
    WorkloadCounts& wc = merged.by_workload[k];
    RowResult row;
    row.index = static_cast<int>(k);
    row.name = options_.workloads[k].Describe();
    row.duration_s = merged.duration_s;
    row.requests = wc.completed;
    row.errors = wc.errors;
    row.errors_by_code = wc.errors_by_code;
    if (merged.duration_s > 0) {
      row.throughput_rps = (wc.completed - wc.errors) / merged.duration_s;
      row.gbps = wc.bytes / merged.duration_s / 1e9;
    }
    row.latency = Summarize(wc.latencies_us);
    step.workload_rows.push_back(std::move(row));
  }
  if (merged.gpu.util_n > 0) step.gpu_util_pct = merged.gpu.util_sum / merged.gpu.util_n;
  if (merged.gpu.power_n > 0) step.gpu_power_w = merged.gpu.power_sum / merged.gpu.power_n;
  if (merged.gpu.memory_n > 0) {
    step.gpu_memory_bytes = merged.gpu.memory_sum / merged.gpu.memory_n;
  }
  if (!options_.metrics_url.empty()) {
    step.server_requests = merged.server_requests;
    if (merged.server_queue_count > 0) {
      step.server_queue_mean_us = 1e6 * merged.server_queue_sum_s / merged.server_queue_count;
    }
    if (merged.server_compute_count > 0) {
      step.server_compute_mean_us = 1e6 * merged.server_compute_sum_s / merged.server_compute_count;
    }
  }
  {
    absl::MutexLock l(&mu_);
    step.sent_total = sent_ - sent0;
    step.completed_total = completed_ - completed0;
    step.errors_total = errors_ - errors0;
  }
  {
    absl::MutexLock l(&verify_mu_);
    step.verified = verified_ - verified0;
    step.wrong = wrong_ - wrong0;
    step.verify_skipped = verify_skipped_ - skipped0;
  }
  return step;
}

const StepResult& LoadRunner::RunAndRecord(double level, RunReport* report) {
  StepResult step = RunStep(level);
  std::printf("%s\n", StepLine(step).c_str());
  std::fflush(stdout);
  report->total_requests += step.completed_total;
  report->total_errors += step.errors_total;
  report->wrong_answers += step.wrong;
  report->steps.push_back(std::move(step));
  return report->steps.back();
}

void LoadRunner::RunSearch(RunReport* report) {
  SearchResult& result = report->search;
  report->searched = true;
  result.p99_bound_us = options_.search_p99_ms * 1e3;
  auto held = [&](const StepResult& s) {
    return s.errors == 0 && !s.overloaded && s.latency.count > 0 &&
           s.latency.p99_us <= result.p99_bound_us;
  };
  auto consider = [&](const StepResult& s) {
    if (held(s) && (!result.found || s.throughput_rps > result.throughput_rps)) {
      result.found = true;
      result.step = static_cast<int>(report->steps.size()) - 1;
      result.level = s.level;
      result.throughput_rps = s.throughput_rps;
      result.p99_us = s.latency.p99_us;
    }
  };
  // Ascend through the levels until one misses the bound.
  double good = 0, bad = 0;
  for (double level : options_.levels) {
    const StepResult& s = RunAndRecord(level, report);
    consider(s);
    if (!held(s)) {
      bad = level;
      break;
    }
    good = level;
  }
  // Bisect between the last level that held and the first that did not.
  for (int i = 0; i < options_.search_bisections && bad > 0; ++i) {
    const double lo = good > 0 ? good : bad / 2;
    double mid = options_.closed_loop ? std::floor((lo + bad) / 2) : (lo + bad) / 2;
    if (mid <= good || mid >= bad || (!options_.closed_loop && bad / lo < 1.05)) break;
    if (options_.closed_loop && mid < 1) break;
    const StepResult& s = RunAndRecord(mid, report);
    consider(s);
    if (held(s)) {
      good = mid;
    } else {
      bad = mid;
    }
  }
  std::printf("%s\n", SearchLine(*report).c_str());
}

absl::StatusOr<RunReport> LoadRunner::Run() {
  RunReport report;
  report.mode = options_.closed_loop              ? "concurrency"
                : !options_.schedule_s.empty() ? "schedule"
                                               : "rate";
  for (const auto& w : options_.workloads) {
    report.workloads.push_back(
        absl::StrCat(w.Describe(), options_.workloads.size() > 1
                                       ? absl::StrFormat(" x%g", w.mix_weight)
                                       : std::string()));
  }
  if (absl::Status s = Setup(&report); !s.ok()) {
    Teardown();
    return s;
  }
  for (const std::string& d : report.workloads) std::printf("workload: %s\n", d.c_str());
  std::printf("per step: %g s warm-up, then at least %g s measured in windows of %g s "
              "(%d to %d windows, last %d stable within %g %%)\n",
              options_.warmup_s, options_.duration_s, options_.window_s, min_windows_,
              options_.max_trials, options_.stable_windows, options_.stability_pct);
  const Scrape start = DoScrape();
  if (options_.search) {
    RunSearch(&report);
  } else {
    for (size_t i = 0; i < options_.levels.size(); ++i) {
      if (RunAndRecord(options_.levels[i], &report).overloaded &&
          i + 1 < options_.levels.size()) {
        std::printf("overloaded: sends fell more than %g ms behind; the higher levels "
                    "are not run\n", options_.max_behind_ms);
        break;
      }
    }
  }
  // Servers may count a request just after answering it.
  if (start.ok) absl::SleepFor(absl::Milliseconds(200));
  const Scrape end = DoScrape();
  if (start.ok && end.ok) report.server_requests_delta = end.requests - start.requests;
  {
    absl::MutexLock l(&verify_mu_);
    report.first_wrong = first_wrong_;
  }
  Teardown();
  return report;
}

}  // namespace conv1d
