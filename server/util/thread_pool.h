// ThreadPool: a fixed set of worker threads, created once, that runs
// data-parallel loops (ParallelFor): the CPU backend's compute and the GPU
// backend's staging copies.
//
// The calling thread takes part in its own loop, so a ParallelFor never waits
// for an idle worker and nested or concurrent calls cannot deadlock; blocks
// are claimed dynamically, so uneven blocks balance themselves. No thread is
// created after Create().
//
// Thread-safety: ParallelFor may be called concurrently from any number of
// threads (e.g. one per scheduler lane). The pool must outlive every call.
#ifndef CONV1D_SERVER_UTIL_THREAD_POOL_H_
#define CONV1D_SERVER_UTIL_THREAD_POOL_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace conv1d {

struct ThreadPoolOptions {
  // Total parallelism including the calling thread; 0 means
  // std::thread::hardware_concurrency(). Valid range 0..4096
  // (INVALID_ARGUMENT outside). threads = 1 runs every loop on the caller.
  int threads = 0;
};

class ThreadPool {
 public:
  static absl::StatusOr<std::unique_ptr<ThreadPool>> Create(
      ThreadPoolOptions options);
  // Joins the workers. REQUIRES: no ParallelFor in flight.
  ~ThreadPool();

  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Workers plus the caller.
  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) over disjoint ranges covering [0, n), each of at
  // least `min_block` items (except the last), and returns when all are done.
  // fn runs on the caller and on workers; it must not throw.
  void ParallelFor(int64_t n, int64_t min_block,
                   absl::FunctionRef<void(int64_t, int64_t)> fn);

 private:
  struct Job;

  explicit ThreadPool(int workers);
  void WorkerLoop();
  bool HasWorkOrStop() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Claims and runs blocks of `job` until none are left.
  static void RunBlocks(Job* job);
  void RemoveFromQueue(Job* job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  std::deque<Job*> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

// Runs fn over [0, n) on `pool`, or entirely on the caller when pool is null.
void ParallelFor(ThreadPool* pool, int64_t n, int64_t min_block,
                 absl::FunctionRef<void(int64_t, int64_t)> fn);

}  // namespace conv1d

#endif  // CONV1D_SERVER_UTIL_THREAD_POOL_H_
