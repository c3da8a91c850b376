// Scheduler: turns submitted Tasks into fused backend batches (DESIGN §3).
//
// Tasks are queued per BatchKey. Each backend lane has one thread; an idle
// lane picks the key whose head task is oldest (so keys are served fairly),
// takes that key's tasks in FIFO order up to the batch bounds, drops the
// ones whose deadline passed or whose client cancelled, and calls
// Backend::RunBatch with the rest. With max_queue_delay_us > 0 the lane first
// waits, up to that long after the head task was queued, for the batch to
// fill; meanwhile other lanes serve other keys. The scheduler sees only
// tasks and keys; it never looks inside tensors.
//
// Ownership: Submit takes ownership of a Task iff it returns OK; from then
// on the Task's on_done is called exactly once, after which the Task is
// destroyed. on_done runs on a lane thread or, for the tasks of a large
// fused batch, on one of the completion threads that share out the batch's
// on_done calls (so that the last task of a batch is not finished after all
// the others, one by one); tasks failed by a Shutdown whose timeout expired
// finish on the Shutdown caller's thread.
// The backend, clock and observer are not owned and must outlive the
// Scheduler.
//
// Lanes: one thread per Backend::num_lanes(). A lane for which
// Backend::LaneAvailable() is false stays idle (re-asking every second on
// the injected clock) while another lane can serve; when no lane can, queued
// tasks fail with Backend::Health()'s status (UNAVAILABLE by default)
// instead of waiting for their deadlines.
//
// Observer: the scheduler reports OnQueueDepth (after every change, with the
// queue lock held so the gauge ends at the true value), OnTaskDequeued and
// OnBatchDone (for every RunBatch call, failed or not), and OnRejected for
// kQueueFull, kDeadline, kCancelled and kDraining; callers must not report
// those rejections again.
//
// Submission: Submit never waits for the queue lock. An accepted task is
// pushed onto a lock-free inbox, and one submitter at a time (the one that
// finds nobody filing) takes the lock and files every task waiting there
// into the per-key queues; lane threads file it too when they take work.
// Submitters that arrive together (the requests a finished fused batch
// answered) thus cost one lock hand-off, not one each. Queue depth is
// reported when tasks are filed; queued_requests() and max_queued_requests
// count inbox tasks as well.
//
// Thread-safety: every public method is thread-safe. The queue lock is held
// only to file and dequeue; never while a backend computes or while on_done
// runs.
#ifndef CONV1D_SERVER_CORE_SCHEDULER_H_
#define CONV1D_SERVER_CORE_SCHEDULER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/core/backend.h"
#include "server/core/clock.h"
#include "server/core/conv_problem.h"
#include "server/core/observer.h"
#include "server/core/task.h"

namespace conv1d {

struct SchedulerOptions {
  // Budget of Σ Task::bytes() (bytes read plus written) per fused batch.
  // A single task larger than this still runs, alone. Past a few MiB a
  // batch has nothing left to amortise (a launch costs microseconds, 16 MiB
  // of copies hundreds of them), while smaller batches let the lanes'
  // copies and kernels overlap: 1 MB forwards ran 18-25 % faster in
  // process at 16 MiB than at 256 MiB (bench/runtime/README.md).
  // Default 16 MiB; valid range >= 1; otherwise INVALID_ARGUMENT.
  int64_t max_batch_bytes = int64_t{16} << 20;
  // Tasks per fused batch; 1 disables fusion.
  // Default 64; valid range 1..65536; otherwise INVALID_ARGUMENT.
  int32_t max_batch_requests = 64;
  // How long a lane may wait, after the oldest queued task of a key was
  // submitted, for more tasks of that key to fill the batch. 0 means
  // work-conserving: run whatever is queued now.
  // Default 0; valid range 0..10'000'000 (10 s); otherwise INVALID_ARGUMENT.
  int64_t max_queue_delay_us = 0;
  // Tasks queued (not yet taken by a lane) across all keys; Submit answers
  // RESOURCE_EXHAUSTED beyond it.
  // Default 4096; valid range 1..16'777'216; otherwise INVALID_ARGUMENT.
  int32_t max_queued_requests = 4096;
  // Threads that call on_done for the tasks of fused batches alongside the
  // lane: a batch of at least 2 * completion_chunk tasks is cut into chunks
  // of at least completion_chunk; the lane finishes one and these threads
  // the others, while the lane goes on to its next batch. 0: lanes call
  // every on_done themselves.
  // Default 4; valid range 0..64; otherwise INVALID_ARGUMENT.
  int32_t completion_threads = 4;
  // Fewest tasks whose on_done calls a completion thread takes at once.
  // Default 8; valid range 1..4096; otherwise INVALID_ARGUMENT.
  int32_t completion_chunk = 8;
};

struct SchedulerStats {
  int64_t submitted = 0;   // Submit calls that returned OK
  int64_t completed = 0;   // tasks whose batch succeeded
  int64_t batches = 0;     // RunBatch calls
  int64_t fused_batches = 0;  // RunBatch calls with more than one task
  int64_t max_batch_requests_seen = 0;  // most tasks in one RunBatch call
  int64_t rejected_queue_full = 0;  // Submit answered RESOURCE_EXHAUSTED
  int64_t dropped_deadline = 0;     // DEADLINE_EXCEEDED before compute
  int64_t dropped_cancelled = 0;    // CANCELLED before compute
  int64_t failed = 0;               // tasks in batches the backend failed
  int64_t dropped_shutdown = 0;     // UNAVAILABLE: still queued at the
                                    // end of Shutdown's timeout
  // Once idle: submitted == completed + dropped_deadline +
  //   dropped_cancelled + failed + dropped_shutdown.
};

class Scheduler {
 public:
  // Validates `options` (INVALID_ARGUMENT naming the field), checks that
  // `backend` and `clock` are non-null and the backend has >= 1 lane
  // (INVALID_ARGUMENT), and starts one thread per lane. `observer` may be
  // null. None of the pointers is owned; all must outlive the Scheduler.
  static absl::StatusOr<std::unique_ptr<Scheduler>> Create(
      const SchedulerOptions& options, Backend* backend, Clock* clock,
      Observer* observer);

  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;
  // Calls Shutdown() with its default timeout.
  ~Scheduler();

  // Queues *task. Ownership of *task is transferred iff this returns OK
  // (then *task is null and its on_done will be called exactly once);
  // otherwise *task is left untouched and on_done is not called.
  // Errors: INVALID_ARGUMENT for a null task; RESOURCE_EXHAUSTED when
  // max_queued_requests tasks are queued (retry later); UNAVAILABLE once
  // Shutdown has started.
  absl::Status Submit(std::unique_ptr<Task>* task);

  // Stops accepting (Submit answers UNAVAILABLE), lets the lanes run every
  // queued task, then joins the lane threads. Tasks still queued when
  // `timeout` (on the injected clock) has passed fail with UNAVAILABLE;
  // batches already running always finish. Idempotent; concurrent callers
  // all return once shutdown is complete.
  // REQUIRES: not called from on_done or from the backend (it joins the
  // lane and completion threads those run on).
  void Shutdown(absl::Duration timeout = absl::Seconds(30));

  // Tasks queued and not yet taken by a lane.
  int64_t queued_requests() const;
  SchedulerStats stats() const;
  const SchedulerOptions& options() const { return options_; }

 private:
  struct Entry {
    std::unique_ptr<Task> task;
    uint64_t seq;  // submission order; breaks ties between equal times
    int64_t bytes;
  };
  // An accepted task waiting in the inbox (newest first).
  struct InboxNode {
    Entry entry;
    InboxNode* next;
  };
  struct KeyQueue {
    std::deque<Entry> entries;
    int64_t bytes = 0;
    // A lane is waiting for this queue to fill; only that lane dequeues it.
    bool claimed = false;
    std::string family;
  };

  Scheduler(const SchedulerOptions& options, Backend* backend, Clock* clock,
            Observer* observer);

  // Which keys a lane takes: those it may compute (its device's and those
  // of no device), every key (to fail them when no lane can compute), or
  // only its own device's (to fail them when no lane of its device can).
  enum class Takes { kComputable, kAll, kOwnDevice };
  bool TakesLocked(int lane, Takes takes, const BatchKey& key) const;

  void LaneLoop(int lane);
  // Picks the unclaimed, non-empty queue with the oldest head among the
  // keys `lane` takes; returns false when there is none.
  bool PickKeyLocked(int lane, Takes takes, BatchKey* key) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Files every inbox task into its key's queue, in submission order.
  void DrainInboxLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Run by the submitter that set filing_: drains the inbox under the lock
  // until it finds the inbox empty after clearing filing_.
  void FileInbox() ABSL_LOCKS_EXCLUDED(mu_);
  bool HasUnclaimedWorkLocked(int lane, Takes takes) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool BatchFullLocked(const KeyQueue& q) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves a FIFO prefix of `key`'s queue, within the batch bounds (always at
  // least one task), into *batch.
  void TakeBatchLocked(const BatchKey& key,
                       std::vector<std::unique_ptr<Task>>* batch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops cancelled and expired tasks, runs the rest (or, when `refuse` is
  // not OK, fails them with it without computing), calls every on_done.
  void RunBatch(int lane, const BatchKey& key,
                std::vector<std::unique_ptr<Task>> batch,
                const absl::Status& refuse);
  // Any lane available; with device >= 0, any lane of that device.
  bool AnyLaneAvailable(int32_t device = -1) const;
  // Calls on_done(status) of every task and destroys it: the lane's share
  // here, the rest (for large batches) on the completion threads.
  void FinishTasks(std::vector<std::unique_ptr<Task>> tasks, const absl::Status& status);
  void CompletionLoop();
  void ReportDepthLocked(const std::string& family)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const SchedulerOptions options_;
  const absl::Duration max_queue_delay_;
  Backend* const backend_;
  const int num_lanes_;
  const std::vector<int32_t> lane_device_;  // Backend::LaneDevice per lane
  Clock* const clock_;
  Observer* const observer_;  // may be null

  // Serialises Shutdown callers; taken before mu_.
  absl::Mutex shutdown_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  bool shut_down_ ABSL_GUARDED_BY(shutdown_mu_) = false;
  std::vector<std::thread> lanes_ ABSL_GUARDED_BY(shutdown_mu_);
  std::vector<std::thread> completers_ ABSL_GUARDED_BY(shutdown_mu_);

  // Chunks of finished batches waiting for a completion thread.
  struct CompletionJob {
    std::vector<std::unique_ptr<Task>> tasks;
    absl::Status status;
  };
  absl::Mutex completion_mu_;
  std::deque<CompletionJob> completion_queue_ ABSL_GUARDED_BY(completion_mu_);
  bool completion_stop_ ABSL_GUARDED_BY(completion_mu_) = false;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<BatchKey, KeyQueue> queues_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, int64_t> family_depth_ ABSL_GUARDED_BY(mu_);
  // Accepted tasks not yet taken by a lane (inbox and queues), plus, for a
  // moment, the place a Submit reserves before it checks accepting_: a
  // Submit adds to it and then reads accepting_, Shutdown clears accepting_
  // and then waits for it to reach 0 (all sequentially consistent), so a
  // task is either refused or waited for. Decremented under mu_, except by
  // refused Submits, which then take mu_ once so waiters re-check.
  std::atomic<int64_t> queued_{0};
  std::atomic<uint64_t> next_seq_{0};
  std::atomic<bool> accepting_{true};
  std::atomic<InboxNode*> inbox_{nullptr};
  // Set while a submitter is filing the inbox (see FileInbox).
  std::atomic<bool> filing_{false};
  std::atomic<int64_t> submitted_{0};
  std::atomic<int64_t> rejected_queue_full_{0};
  // Set by Shutdown: lanes stop waiting for batches to fill and exit once
  // nothing is queued.
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  SchedulerStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace conv1d

#endif  // CONV1D_SERVER_CORE_SCHEDULER_H_
