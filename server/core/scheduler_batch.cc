// Scheduler: running a batch a lane has taken (Backend::RunBatch, stats,
// observer reports) and finishing its tasks, on the lane or shared out to the
// completion threads. Split from scheduler.cc; the thread-safety contract is
// the class's (scheduler.h).
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/core/scheduler.h"

namespace conv1d {

void Scheduler::RunBatch(int lane, const BatchKey& key,
                         std::vector<std::unique_ptr<Task>> batch,
                         const absl::Status& refuse) {
  const absl::Time start = clock_->Now();
  std::vector<std::unique_ptr<Task>> run;
  std::vector<std::pair<std::unique_ptr<Task>, absl::Status>> dropped;
  run.reserve(batch.size());
  for (auto& task : batch) {
    task->timings.batch_start = start;
    const absl::Duration queue_time = start - task->timings.enqueued;
    if (observer_ != nullptr) observer_->OnTaskDequeued(key, queue_time);
    if (task->cancelled && task->cancelled()) {
      dropped.emplace_back(std::move(task),
                           absl::CancelledError(
                               "request cancelled by the client while queued"));
    } else if (task->deadline <= start) {
      dropped.emplace_back(
          std::move(task),
          absl::DeadlineExceededError(absl::StrCat(
              "deadline passed while queued (queued for ",
              absl::FormatDuration(queue_time), "; not computed)")));
    } else {
      run.push_back(std::move(task));
    }
  }

  if (!dropped.empty()) {
    {
      absl::MutexLock lock(&mu_);
      for (const auto& [task, status] : dropped) {
        if (absl::IsCancelled(status)) {
          ++stats_.dropped_cancelled;
        } else {
          ++stats_.dropped_deadline;
        }
      }
    }
    for (auto& [task, status] : dropped) {
      if (observer_ != nullptr) {
        observer_->OnRejected(absl::IsCancelled(status)
                                  ? RejectReason::kCancelled
                                  : RejectReason::kDeadline);
      }
      task->timings.batch_end = start;
      FinishTask(std::move(task), status);
    }
  }
  if (run.empty()) return;
  if (!refuse.ok()) {
    {
      absl::MutexLock lock(&mu_);
      stats_.failed += static_cast<int64_t>(run.size());
    }
    for (auto& task : run) {
      task->timings.batch_end = start;
      task->timings.batch_requests = static_cast<int32_t>(run.size());
      FinishTask(std::move(task), refuse);
    }
    return;
  }

  std::vector<ConvSegment*> segments;
  segments.reserve(run.size());
  int64_t sequences = 0;
  int64_t bytes = 0;
  int32_t session_steps = 0;
  for (auto& task : run) {
    segments.push_back(&task->segment);
    sequences += task->segment.batch;
    bytes += task->bytes();
    session_steps += task->session_step ? 1 : 0;
    task->timings.reached_backend = true;
  }
  BatchStats batch_stats;
  const absl::Status status =
      backend_->RunBatch(lane, key, absl::MakeConstSpan(segments), &batch_stats);
  const absl::Time end = clock_->Now();
  const int32_t n = static_cast<int32_t>(run.size());
  if (observer_ != nullptr) {
    observer_->OnBatchDone(lane, key, n, sequences, bytes, batch_stats,
                           end - start);
    if (session_steps > 0) observer_->OnSessionStepsPerLaunch(session_steps);
  }
  {
    absl::MutexLock lock(&mu_);
    ++stats_.batches;
    if (n > 1) ++stats_.fused_batches;
    stats_.max_batch_requests_seen =
        std::max<int64_t>(stats_.max_batch_requests_seen, n);
    if (status.ok()) {
      stats_.completed += n;
    } else {
      stats_.failed += n;
    }
  }
  for (auto& task : run) {
    task->timings.batch_end = end;
    task->timings.batch_requests = n;
  }
  FinishTasks(std::move(run), status);
}

void Scheduler::FinishTasks(std::vector<std::unique_ptr<Task>> tasks,
                            const absl::Status& status) {
  const int n = static_cast<int>(tasks.size());
  const int helpers = options_.completion_threads;
  int own_begin = 0;  // the lane's share: tasks[own_begin, n)
  const int min_chunk = options_.completion_chunk;
  if (helpers > 0 && n >= 2 * min_chunk) {
    // Chunk c is tasks [n * c / chunks, n * (c + 1) / chunks): each holds at
    // least min_chunk tasks; the lane keeps the last.
    const int chunks = std::min(helpers + 1, n / min_chunk);
    own_begin = n * (chunks - 1) / chunks;
    absl::MutexLock lock(&completion_mu_);
    for (int c = 0; c + 1 < chunks; ++c) {
      CompletionJob job;
      job.status = status;
      const int begin = n * c / chunks, end = n * (c + 1) / chunks;
      job.tasks.reserve(end - begin);
      for (int i = begin; i < end; ++i) job.tasks.push_back(std::move(tasks[i]));
      completion_queue_.push_back(std::move(job));
    }
  }
  for (int i = own_begin; i < n; ++i) {
    FinishTask(std::move(tasks[i]), status);
  }
}

void Scheduler::CompletionLoop() {
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(completion_mu_) {
    return completion_stop_ || !completion_queue_.empty();
  };
  while (true) {
    CompletionJob job;
    {
      absl::MutexLock lock(&completion_mu_);
      completion_mu_.Await(absl::Condition(&ready));
      if (completion_queue_.empty()) return;  // stopping, nothing left
      job = std::move(completion_queue_.front());
      completion_queue_.pop_front();
    }
    for (auto& task : job.tasks) {
      FinishTask(std::move(task), job.status);
    }
  }
}

}  // namespace conv1d
