#include "server/core/scheduler.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace conv1d {
namespace {

constexpr int32_t kMaxBatchRequestsLimit = 65536;
constexpr int64_t kMaxQueueDelayUsLimit = 10'000'000;
constexpr int32_t kMaxQueuedRequestsLimit = 16'777'216;
constexpr int32_t kMaxCompletionThreads = 64;
// How often an unavailable lane asks the backend again (on the injected
// clock).
constexpr absl::Duration kUnavailableLaneRecheck = absl::Seconds(1);

}  // namespace

absl::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(
    const SchedulerOptions& options, Backend* backend, Clock* clock,
    Observer* observer) {
  if (options.max_batch_bytes < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_batch_bytes must be >= 1, got ", options.max_batch_bytes));
  }
  if (options.max_batch_requests < 1 ||
      options.max_batch_requests > kMaxBatchRequestsLimit) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_batch_requests must be in [1, ", kMaxBatchRequestsLimit,
        "], got ", options.max_batch_requests));
  }
  if (options.max_queue_delay_us < 0 ||
      options.max_queue_delay_us > kMaxQueueDelayUsLimit) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_queue_delay_us must be in [0, ", kMaxQueueDelayUsLimit,
        "], got ", options.max_queue_delay_us));
  }
  if (options.max_queued_requests < 1 ||
      options.max_queued_requests > kMaxQueuedRequestsLimit) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_queued_requests must be in [1, ", kMaxQueuedRequestsLimit,
        "], got ", options.max_queued_requests));
  }
  if (options.completion_threads < 0 ||
      options.completion_threads > kMaxCompletionThreads) {
    return absl::InvalidArgumentError(absl::StrCat(
        "completion_threads must be in [0, ", kMaxCompletionThreads, "], got ",
        options.completion_threads));
  }
  if (options.completion_chunk < 1 || options.completion_chunk > 4096) {
    return absl::InvalidArgumentError(absl::StrCat(
        "completion_chunk must be in [1, 4096], got ", options.completion_chunk));
  }
  if (backend == nullptr) return absl::InvalidArgumentError("backend is null");
  if (clock == nullptr) return absl::InvalidArgumentError("clock is null");
  const int num_lanes = backend->num_lanes();
  if (num_lanes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("backend '", backend->name(), "' reports ", num_lanes,
                     " lanes; at least 1 is needed"));
  }
  std::unique_ptr<Scheduler> scheduler(
      new Scheduler(options, backend, clock, observer));
  {
    absl::MutexLock lock(&scheduler->shutdown_mu_);
    for (int lane = 0; lane < num_lanes; ++lane) {
      Scheduler* s = scheduler.get();
      scheduler->lanes_.emplace_back([s, lane] { s->LaneLoop(lane); });
    }
    for (int i = 0; i < options.completion_threads; ++i) {
      Scheduler* s = scheduler.get();
      scheduler->completers_.emplace_back([s] { s->CompletionLoop(); });
    }
  }
  return scheduler;
}

Scheduler::Scheduler(const SchedulerOptions& options, Backend* backend,
                     Clock* clock, Observer* observer)
    : options_(options),
      max_queue_delay_(absl::Microseconds(options.max_queue_delay_us)),
      backend_(backend),
      num_lanes_(backend->num_lanes()),
      lane_device_([backend] {
        std::vector<int32_t> d(backend->num_lanes());
        for (int lane = 0; lane < static_cast<int>(d.size()); ++lane) {
          d[lane] = backend->LaneDevice(lane);
        }
        return d;
      }()),
      clock_(clock),
      observer_(observer) {}

Scheduler::~Scheduler() { Shutdown(); }

absl::Status Scheduler::Submit(std::unique_ptr<Task>* task) {
  if (task == nullptr || *task == nullptr) {
    return absl::InvalidArgumentError("Submit: task is null");
  }
  RejectReason reason;
  absl::Status status;
  // Reserve a place, then check accepting_ (see queued_).
  const int64_t before = queued_.fetch_add(1);
  if (!accepting_.load()) {
    reason = RejectReason::kDraining;
    status = absl::UnavailableError(
        "scheduler is shutting down and accepts no new requests");
  } else if (before >= options_.max_queued_requests) {
    rejected_queue_full_.fetch_add(1, std::memory_order_relaxed);
    reason = RejectReason::kQueueFull;
    status = absl::ResourceExhaustedError(absl::StrCat(
        "request queue is full (max_queued_requests=",
        options_.max_queued_requests, "); retry later"));
  } else {
    Task& t = **task;
    t.timings.enqueued = clock_->Now();
    const int64_t bytes = t.bytes();
    submitted_.fetch_add(1, std::memory_order_relaxed);
    auto* node = new InboxNode{Entry{std::move(*task), next_seq_.fetch_add(1), bytes}, nullptr};
    InboxNode* head = inbox_.load(std::memory_order_relaxed);
    do {
      node->next = head;
    } while (!inbox_.compare_exchange_weak(head, node, std::memory_order_seq_cst,
                                           std::memory_order_relaxed));
    // Whoever is filing now files this task too (FileInbox re-checks the
    // inbox after clearing filing_); otherwise this submitter files.
    if (!filing_.exchange(true)) FileInbox();
    return absl::OkStatus();
  }
  // Refused: give the place back; when that empties the queue, waiters on
  // queued_ == 0 (Shutdown, exiting lanes) re-check as mu_ is released.
  if (queued_.fetch_sub(1) == 1) {
    absl::MutexLock lock(&mu_);
  }
  if (observer_ != nullptr) observer_->OnRejected(reason);
  return status;
}

void Scheduler::FileInbox() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      DrainInboxLocked();
    }
    filing_.store(false);
    // A Submit that pushed after the drain and found filing_ set left its
    // task to us: its push precedes its exchange, our store precedes this
    // load, so one of the two sees the other.
    if (inbox_.load() == nullptr || filing_.exchange(true)) return;
  }
}

void Scheduler::DrainInboxLocked() {
  InboxNode* node = inbox_.exchange(nullptr, std::memory_order_acquire);
  InboxNode* fifo = nullptr;  // reversed: oldest first
  while (node != nullptr) {
    InboxNode* next = node->next;
    node->next = fifo;
    fifo = node;
    node = next;
  }
  while (fifo != nullptr) {
    std::unique_ptr<InboxNode> n(fifo);
    fifo = fifo->next;
    const BatchKey& key = n->entry.task->key;
    auto [it, inserted] = queues_.try_emplace(key);
    KeyQueue& q = it->second;
    if (inserted) q.family = key.Family();
    q.bytes += n->entry.bytes;
    q.entries.push_back(std::move(n->entry));
    ++family_depth_[q.family];
    ReportDepthLocked(q.family);
  }
}

void Scheduler::Shutdown(absl::Duration timeout) {
  absl::MutexLock shutdown_lock(&shutdown_mu_);
  if (shut_down_) return;
  std::vector<std::unique_ptr<Task>> abandoned;
  {
    absl::MutexLock lock(&mu_);
    accepting_.store(false);
    draining_ = true;
    const absl::Time deadline = clock_->Now() + timeout;
    auto drained = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return queued_ == 0;
    };
    while (queued_ > 0 && clock_->Now() < deadline) {
      clock_->AwaitWithDeadline(&mu_, absl::Condition(&drained), deadline);
    }
    DrainInboxLocked();
    for (auto it = queues_.begin(); it != queues_.end();) {
      KeyQueue& q = it->second;
      const int64_t n = static_cast<int64_t>(q.entries.size());
      for (Entry& e : q.entries) abandoned.push_back(std::move(e.task));
      q.entries.clear();
      q.bytes = 0;
      queued_ -= n;
      family_depth_[q.family] -= n;
      if (n > 0) ReportDepthLocked(q.family);
      // A claimed queue's lane erases it when it wakes (draining_ wakes it).
      if (!q.claimed) {
        queues_.erase(it++);
      } else {
        ++it;
      }
    }
    stats_.dropped_shutdown += static_cast<int64_t>(abandoned.size());
  }
  if (!abandoned.empty()) {
    const absl::Status status = absl::UnavailableError(absl::StrCat(
        "server shutting down: request was still queued when the drain "
        "timeout (",
        absl::FormatDuration(timeout), ") expired"));
    const absl::Time now = clock_->Now();
    for (auto& task : abandoned) {
      if (observer_ != nullptr) observer_->OnRejected(RejectReason::kDraining);
      task->timings.batch_start = task->timings.batch_end = now;
      FinishTask(std::move(task), status);
    }
  }
  for (std::thread& t : lanes_) t.join();
  lanes_.clear();
  {
    absl::MutexLock lock(&completion_mu_);
    completion_stop_ = true;
  }
  // They finish every queued chunk before they exit.
  for (std::thread& t : completers_) t.join();
  completers_.clear();
  shut_down_ = true;
}

int64_t Scheduler::queued_requests() const { return queued_.load(); }

SchedulerStats Scheduler::stats() const {
  SchedulerStats s;
  {
    absl::MutexLock lock(&mu_);
    s = stats_;
  }
  s.submitted = submitted_.load();
  s.rejected_queue_full = rejected_queue_full_.load();
  return s;
}

bool Scheduler::TakesLocked(int lane, Takes takes, const BatchKey& key) const {
  const int32_t own = lane_device_[lane];
  switch (takes) {
    case Takes::kAll: return true;
    case Takes::kOwnDevice: return key.device >= 0 && key.device == own;
    case Takes::kComputable: break;
  }
  return key.device < 0 || own < 0 || key.device == own;
}

bool Scheduler::HasUnclaimedWorkLocked(int lane, Takes takes) const {
  for (const auto& [key, q] : queues_) {
    if (!q.claimed && !q.entries.empty() && TakesLocked(lane, takes, key)) return true;
  }
  return false;
}

bool Scheduler::PickKeyLocked(int lane, Takes takes, BatchKey* key) const {
  const KeyQueue* best = nullptr;
  for (const auto& [k, q] : queues_) {
    if (q.claimed || q.entries.empty() || !TakesLocked(lane, takes, k)) continue;
    if (best == nullptr || q.entries.front().seq < best->entries.front().seq) {
      best = &q;
      *key = k;
    }
  }
  return best != nullptr;
}

bool Scheduler::BatchFullLocked(const KeyQueue& q) const {
  return static_cast<int64_t>(q.entries.size()) >= options_.max_batch_requests ||
         q.bytes >= options_.max_batch_bytes;
}

void Scheduler::TakeBatchLocked(const BatchKey& key,
                                std::vector<std::unique_ptr<Task>>* batch) {
  auto it = queues_.find(key);
  if (it == queues_.end()) return;
  KeyQueue& q = it->second;
  int64_t bytes = 0;
  while (!q.entries.empty() &&
         static_cast<int64_t>(batch->size()) < options_.max_batch_requests) {
    Entry& e = q.entries.front();
    if (!batch->empty() && bytes + e.bytes > options_.max_batch_bytes) break;
    bytes += e.bytes;
    q.bytes -= e.bytes;
    batch->push_back(std::move(e.task));
    q.entries.pop_front();
  }
  const int64_t n = static_cast<int64_t>(batch->size());
  if (n > 0) {
    queued_ -= n;
    family_depth_[q.family] -= n;
    ReportDepthLocked(q.family);
  }
  if (q.entries.empty() && !q.claimed) queues_.erase(it);
}

void Scheduler::ReportDepthLocked(const std::string& family) {
  if (observer_ != nullptr) {
    observer_->OnQueueDepth(family, family_depth_[family]);
  }
}

void Scheduler::LaneLoop(int lane) {
  while (true) {
    // Availability is polled: a lane whose device failed stays idle while
    // another lane can serve; when none can, queued tasks are failed at once
    // rather than left to wait for their deadlines. Tasks bound to a device
    // none of whose lanes can serve are failed by that device's lanes.
    absl::Status refuse;
    Takes takes = Takes::kComputable;
    if (!backend_->LaneAvailable(lane)) {
      const int32_t own = lane_device_[lane];
      if (AnyLaneAvailable()) {
        if (own < 0 || AnyLaneAvailable(own)) {
          absl::MutexLock lock(&mu_);
          if (draining_) return;  // the available lanes drain the queues
          clock_->AwaitWithDeadline(&mu_, absl::Condition(&draining_),
                                    clock_->Now() + kUnavailableLaneRecheck);
          continue;
        }
        takes = Takes::kOwnDevice;
      } else {
        takes = Takes::kAll;
      }
      refuse = backend_->Health();
      if (refuse.ok()) {
        refuse = absl::UnavailableError(
            takes == Takes::kAll
                ? absl::StrCat("no lane of backend '", backend_->name(), "' can take work")
                : absl::StrCat("no lane of device ", own, " of backend '", backend_->name(),
                               "' can take work"));
      }
    }
    auto has_work = [this, lane, takes]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return HasUnclaimedWorkLocked(lane, takes) || (draining_ && queued_ == 0);
    };
    BatchKey key;
    std::vector<std::unique_ptr<Task>> batch;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(&has_work));
      DrainInboxLocked();  // what a filer waiting for the lock would file
      if (!PickKeyLocked(lane, takes, &key)) {
        if (draining_ && queued_ == 0) return;  // drained
        continue;  // woken for work this lane does not take
      }
      if (max_queue_delay_ > absl::ZeroDuration() && !draining_ &&
          refuse.ok()) {
        KeyQueue& q = queues_.find(key)->second;
        if (!BatchFullLocked(q)) {
          // Claim the key so no other lane splits this batch; other lanes
          // keep serving other keys while this one waits.
          q.claimed = true;
          const absl::Time deadline =
              q.entries.front().task->timings.enqueued + max_queue_delay_;
          auto full = [this, &key]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
            auto it = queues_.find(key);
            return draining_ || it == queues_.end() ||
                   BatchFullLocked(it->second);
          };
          clock_->AwaitWithDeadline(&mu_, absl::Condition(&full), deadline);
          // Looked up again: the map may have rehashed while we waited.
          auto it = queues_.find(key);
          if (it == queues_.end()) continue;
          it->second.claimed = false;
          if (it->second.entries.empty()) {  // failed by Shutdown meanwhile
            queues_.erase(it);
            continue;
          }
        }
      }
      TakeBatchLocked(key, &batch);
    }
    if (batch.empty()) continue;
    // The lane may have come back while it waited for work.
    if (!refuse.ok() && backend_->LaneAvailable(lane)) refuse = absl::OkStatus();
    RunBatch(lane, key, std::move(batch), refuse);
  }
}

bool Scheduler::AnyLaneAvailable(int32_t device) const {
  for (int lane = 0; lane < num_lanes_; ++lane) {
    if ((device < 0 || lane_device_[lane] == device) && backend_->LaneAvailable(lane)) return true;
  }
  return false;
}

}  // namespace conv1d
