// LoadRunner (load_runner.h), part three: sending a request through the
// transport, recording its answer in the current window, checking a sample
// of answers against the CPU reference on the verifier thread, and the
// server's metrics scraped at window boundaries (http:// or https://,
// prom_scrape.h).
//
// Thread-safety: as load_runner.h says; answers arrive on gRPC callback
// threads and are recorded under mu_ (verification under verify_mu_), and
// DoScrape runs on the thread that called Run().
#include <algorithm>
#include <cstdio>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/load/load_runner.h"
#include "client/load/prom_scrape.h"
#include "client/verify.h"

namespace conv1d {
namespace {
constexpr int kMaxVerifyQueue = 16;
}  // namespace

void LoadRunner::OnComplete(const PoolItem& item, absl::Time t0, bool verify,
                            absl::StatusOr<LoadAnswer> r) {
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
        const int64_t bytes = item.req.request_tensor_bytes + r->output_bytes;
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
  if (!r.ok() || !verify) return;
  const WorkloadSpec& spec = options_.workloads[item.workload];
  const WeightSet* weights = spec.registered_weights ? &weights_[item.workload] : nullptr;
  absl::MutexLock l(&verify_mu_);
  if (verify_queue_.size() >= kMaxVerifyQueue) {
    ++verify_skipped_;
    return;
  }
  verify_queue_.push_back([this, &item, weights, answer = *std::move(r)]() {
    absl::Status s;
    switch (item.req.op) {
      case WorkloadOp::kForward:
        s = VerifyResponse(*item.req.forward, answer.forward, weights);
        break;
      case WorkloadOp::kBackward:
        s = VerifyResponse(*item.req.backward, answer.backward, weights);
        break;
      case WorkloadOp::kUpdate:
        s = VerifyResponse(*item.req.update, answer.update, weights);
        break;
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
  bool verify = false;
  if (options_.verify_fraction > 0) {
    thread_local FastRng rng(reinterpret_cast<uintptr_t>(&rng) ^ options_.seed);
    verify = rng.UniformDouble() < options_.verify_fraction;
    const WorkloadSpec& spec = options_.workloads[item.workload];
    if (verify && spec.registered_weights && registered_names_[item.workload].empty()) {
      verify = false;  // a user-registered set: values unknown here
      absl::MutexLock l(&verify_mu_);
      ++verify_skipped_;
    }
  }
  const absl::Time t0 = absl::Now();
  transport_->Send(item.index, verify, call_,
                   [this, &item, t0, verify, after = std::move(after)](
                       absl::StatusOr<LoadAnswer> r) mutable {
                     OnComplete(item, t0, verify, std::move(r));
                     after();
                   });
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

LoadRunner::Scrape LoadRunner::DoScrape() {
  Scrape s;
  absl::StatusOr<std::string> body = absl::NotFoundError("no --metrics_url");
  if (!options_.metrics_url.empty()) {
    body = HttpGet(options_.metrics_url, absl::Seconds(5), options_.metrics_tls.get());
    if (!body.ok()) {
      std::fprintf(stderr, "conv1d_load: metrics scrape failed: %s\n",
                   body.status().ToString().c_str());
    }
  }
  if (!options_.gpu_metrics_url.empty()) {
    absl::StatusOr<std::string> gpu_body =
        options_.gpu_metrics_url == options_.metrics_url
            ? body
            : HttpGet(options_.gpu_metrics_url, absl::Seconds(5), options_.metrics_tls.get());
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

}  // namespace conv1d
