// LoadRunner: the engine of conv1d_load. Drives a Conv1dClient with a
// pre-generated pool of random requests, closed loop (N requests always in
// flight) or open loop (sends on a constant or Poisson schedule, independent
// of the server's speed, counting late sends), one step per level. Each step
// warms up, then measures windows of `window_s` one after another until at
// least `duration_s` has been measured and the last `stable_windows` agree on
// throughput and p99 within `stability_pct` (or `max_trials` windows have
// passed), optionally scraping the server's Prometheus metrics (and GPU
// gauges) at every window boundary and checking a sample of answers against
// the CPU reference on a separate thread.
//
// An open-loop step whose sends fall more than `max_behind_ms` behind
// schedule ends early, marked overloaded, and the sweep stops there. A
// schedule (send times read from a file) replaces the computed arrivals.
// With `search`, the levels are a search: ascending through them while the
// p99 stays under `search_p99_ms` (no errors, not overloaded), then bisecting
// between the last level that held and the first that did not; the report
// names the step with the highest throughput that held.
//
// Requests travel through a LoadTransport (load_transport.h): conv1d.v1 or
// the inference protocol, tensor bytes in the messages or in a registered
// shared-memory region.
//
// Used by client/load/main.cc. Run() is called from one thread; internally
// completions arrive on gRPC callback threads and are recorded under a mutex.
// The definitions are in load_runner.cc (steps, search), load_pool.cc (pool,
// transport set-up) and load_dispatch.cc (sends, answers, verification,
// scrapes).
#ifndef CONV1D_CLIENT_LOAD_LOAD_RUNNER_H_
#define CONV1D_CLIENT_LOAD_LOAD_RUNNER_H_

#include <atomic>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "client/conv1d_client.h"
#include "client/load/https_get.h"
#include "client/load/load_transport.h"
#include "client/load/report.h"
#include "client/load/stats.h"
#include "client/workload.h"

namespace conv1d {

struct LoadOptions {
  std::vector<WorkloadSpec> workloads;  // mixed by their mix_weight
  // How requests travel (load_transport.h): protocol "v1" or "oip", memory
  // "grpc" (bytes in the messages) or "system" (a shared-memory region;
  // closed loop only).
  std::string protocol = "v1";
  std::string memory = "grpc";
  bool closed_loop = true;
  std::vector<double> levels;  // concurrency or requests/s per step
  bool poisson = false;        // open loop arrivals; else constant spacing
  double warmup_s = 1.0;
  // Measured seconds per step at least, > 0: the step's first
  // ceil(duration_s / window_s) windows always run.
  double duration_s = 6.0;
  // Length of one window; 0 means duration_s / stable_windows, so that the
  // stability rule is first applied when duration_s has been measured.
  double window_s = 0;
  // Windows per step at most; raised to what duration_s needs, and to
  // stable_windows.
  int max_trials = 10;
  int stable_windows = 3;   // windows compared and reported
  double stability_pct = 10.0;
  double verify_fraction = 0.0;
  int pool_size = 16;                     // requests per workload at most
  int64_t pool_bytes = int64_t{1} << 30;  // pool memory bound
  absl::Duration timeout = absl::Seconds(30);
  int max_attempts = 1;                   // 1: failures are counted, not retried
  int max_outstanding = 4096;             // open loop in-flight bound
  double late_us = 1000;                  // a send this far behind is late
  bool progress = false;                  // live line on stdout
  std::string metrics_url;
  // TLS of https:// scrapes (--metrics_url and --gpu_metrics_url); null: the
  // system's default CAs and no client certificate.
  std::shared_ptr<const ScrapeTls> metrics_tls;
  std::string queue_metric = "conv1d_request_queue_seconds";
  std::string compute_metric = "conv1d_compute_seconds";
  std::string requests_metric = "conv1d_requests_total";
  std::string requests_filter;            // label substring, requests counter only
  uint64_t seed = 1;
  // Open loop: end a step (overloaded) when a send is this far behind; 0: never.
  double max_behind_ms = 1000;
  // Open loop from a schedule: send times in seconds from the step's start,
  // ascending, repeated (shifted by their span) until the step ends. When
  // set, `levels` holds one level, the schedule's mean rate.
  std::vector<double> schedule_s;
  bool search = false;
  double search_p99_ms = 0;   // the bound, > 0 with search
  int search_bisections = 4;  // steps spent narrowing after the first miss
  // Inputs from files (one workload only): every request carries these
  // instead of random data; empty: random.
  HostTensor input_x, input_dout, input_state;
  // GPU gauges, scraped beside the server metrics (e.g. DCGM's exporter);
  // averaged over series (devices) and over the measured windows.
  std::string gpu_metrics_url;
  std::string gpu_util_metric = "DCGM_FI_DEV_GPU_UTIL";     // percent
  std::string gpu_power_metric = "DCGM_FI_DEV_POWER_USAGE";  // watts
  std::string gpu_memory_metric = "DCGM_FI_DEV_FB_USED";     // summed over devices
  double gpu_memory_unit_bytes = 1 << 20;                     // DCGM reports MiB
};

class LoadRunner {
 public:
  static absl::StatusOr<std::unique_ptr<LoadRunner>> Create(LoadOptions options,
                                                            Conv1dClient* client);
  ~LoadRunner();

  // Prints one line per step to stdout; returns the whole report.
  absl::StatusOr<RunReport> Run();

 private:
  struct PoolItem {
    PreparedRequest req;
    int workload = 0;
    int index = 0;  // in pool_, as the transport knows it
  };
  struct Scrape {
    bool ok = false;
    double queue_sum = 0, queue_count = 0, compute_sum = 0, compute_count = 0, requests = 0;
    GpuSamples gpu;  // one sample of each gauge found
  };

  LoadRunner(LoadOptions options, Conv1dClient* client)
      : options_(std::move(options)), client_(client) {}
  absl::Status Setup(RunReport* report);
  void Teardown();
  StepResult RunStep(double level);
  // Runs one step and prints its line; appends it to the report.
  const StepResult& RunAndRecord(double level, RunReport* report);
  void RunSearch(RunReport* report);
  std::unique_ptr<WindowStats> NewWindow() const;
  void Dispatch(const PoolItem& item, absl::AnyInvocable<void()> after);
  // `verify`: the answer carries the response, to be checked.
  void OnComplete(const PoolItem& item, absl::Time t0, bool verify,
                  absl::StatusOr<LoadAnswer> r);
  void IssueClosed();
  void SenderLoop(double rate, StepResult* step);
  const PoolItem& NextItem();
  void SleepWithProgress(double seconds, double level);
  Scrape DoScrape();
  void VerifierLoop();

  const LoadOptions options_;
  int min_windows_ = 1;  // windows that make up duration_s
  Conv1dClient* const client_;
  std::unique_ptr<LoadTransport> transport_;
  CallOptions call_;
  std::vector<WeightSet> weights_;
  std::vector<std::string> registered_names_;
  std::vector<PoolItem> pool_;
  std::vector<int> schedule_;  // pool indices in mix proportion, shuffled
  std::atomic<uint64_t> next_{0};
  std::atomic<bool> running_{false};
  std::atomic<bool> overloaded_{false};  // set by the sender: the step ends

  absl::Mutex mu_;
  std::unique_ptr<WindowStats> window_ ABSL_GUARDED_BY(mu_);  // null: not measuring
  int64_t outstanding_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t sent_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t completed_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t errors_ ABSL_GUARDED_BY(mu_) = 0;

  absl::Mutex verify_mu_;
  std::deque<absl::AnyInvocable<void()>> verify_queue_ ABSL_GUARDED_BY(verify_mu_);
  bool verify_stop_ ABSL_GUARDED_BY(verify_mu_) = false;
  int64_t verified_ ABSL_GUARDED_BY(verify_mu_) = 0;
  int64_t wrong_ ABSL_GUARDED_BY(verify_mu_) = 0;
  int64_t verify_skipped_ ABSL_GUARDED_BY(verify_mu_) = 0;
  int64_t verify_busy_ ABSL_GUARDED_BY(verify_mu_) = 0;
  std::string first_wrong_ ABSL_GUARDED_BY(verify_mu_);
  std::thread verifier_;
};

}  // namespace conv1d

#endif  // CONV1D_CLIENT_LOAD_LOAD_RUNNER_H_
