#include "server/util/thread_pool.h"

#include <algorithm>
#include <atomic>

#include "absl/strings/str_cat.h"

namespace conv1d {
namespace {
constexpr int kMaxThreads = 4096;
// Blocks per thread: enough for dynamic balancing, few enough that claiming
// costs nothing next to a block's work.
constexpr int64_t kBlocksPerThread = 4;
}  // namespace

struct ThreadPool::Job {
  Job(absl::FunctionRef<void(int64_t, int64_t)> f, int64_t n_items,
      int64_t block_items, int64_t blocks)
      : fn(f), n(n_items), block(block_items), num_blocks(blocks),
        unfinished(blocks) {}

  absl::FunctionRef<void(int64_t, int64_t)> fn;
  const int64_t n;
  const int64_t block;
  const int64_t num_blocks;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> unfinished;
  // Workers that hold a pointer to this job; guarded by the pool's mu_. The
  // caller returns (destroying the job) only once it is zero.
  int holders = 0;
};

absl::StatusOr<std::unique_ptr<ThreadPool>> ThreadPool::Create(
    ThreadPoolOptions options) {
  if (options.threads < 0 || options.threads > kMaxThreads) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ThreadPoolOptions.threads must be in [0, ", kMaxThreads, "], got ",
        options.threads));
  }
  int threads = options.threads;
  if (threads == 0) {
    threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  }
  return std::unique_ptr<ThreadPool>(new ThreadPool(threads - 1));
}

ThreadPool::ThreadPool(int workers) {
  workers_.reserve(workers);
  for (int i = 0; i < workers; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::RunBlocks(Job* job) {
  while (true) {
    const int64_t b = job->next.fetch_add(1, std::memory_order_relaxed);
    if (b >= job->num_blocks) return;
    const int64_t begin = b * job->block;
    const int64_t end = std::min(job->n, begin + job->block);
    job->fn(begin, end);
    job->unfinished.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::RemoveFromQueue(Job* job) {
  auto it = std::find(queue_.begin(), queue_.end(), job);
  if (it != queue_.end()) queue_.erase(it);
}

bool ThreadPool::HasWorkOrStop() const { return stop_ || !queue_.empty(); }

void ThreadPool::WorkerLoop() {
  absl::MutexLock lock(&mu_);
  while (true) {
    mu_.Await(absl::Condition(this, &ThreadPool::HasWorkOrStop));
    if (queue_.empty()) return;  // stop_ and nothing left to help with
    Job* job = queue_.front();
    ++job->holders;
    mu_.Unlock();
    RunBlocks(job);
    mu_.Lock();
    // Every block is claimed: nobody else should pick this job up.
    RemoveFromQueue(job);
    --job->holders;
  }
}

void ThreadPool::ParallelFor(int64_t n, int64_t min_block,
                             absl::FunctionRef<void(int64_t, int64_t)> fn) {
  if (n <= 0) return;
  min_block = std::max<int64_t>(1, min_block);
  const int64_t max_blocks = (n + min_block - 1) / min_block;
  const int64_t blocks =
      std::min<int64_t>(max_blocks, kBlocksPerThread * num_threads());
  if (blocks <= 1 || workers_.empty()) {
    fn(0, n);
    return;
  }
  const int64_t block = (n + blocks - 1) / blocks;
  Job job(fn, n, block, (n + block - 1) / block);
  {
    absl::MutexLock lock(&mu_);
    queue_.push_back(&job);
  }
  RunBlocks(&job);
  absl::MutexLock lock(&mu_);
  RemoveFromQueue(&job);
  // A worker that finishes the last block then takes mu_ to drop its hold,
  // which re-evaluates this condition.
  mu_.Await(absl::Condition(
      +[](Job* j) {
        return j->holders == 0 &&
               j->unfinished.load(std::memory_order_acquire) == 0;
      },
      &job));
}

void ParallelFor(ThreadPool* pool, int64_t n, int64_t min_block,
                 absl::FunctionRef<void(int64_t, int64_t)> fn) {
  if (pool == nullptr) {
    if (n > 0) fn(0, n);
    return;
  }
  pool->ParallelFor(n, min_block, fn);
}

}  // namespace conv1d
