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
  if (options.memory != "grpc" && !options.closed_loop) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--memory=", options.memory, " takes --concurrency (output slots per request in "
        "flight), not --rate"));
  }
  absl::StatusOr<std::unique_ptr<LoadTransport>> transport =
      MakeLoadTransport(options.protocol, options.memory, client);
  if (!transport.ok()) return transport.status();
  std::unique_ptr<LoadRunner> r(new LoadRunner(std::move(options), client));
  r->transport_ = *std::move(transport);
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

std::unique_ptr<WindowStats> LoadRunner::NewWindow() const {
  auto w = std::make_unique<WindowStats>();
  w->by_workload.resize(options_.workloads.size());
  return w;
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
