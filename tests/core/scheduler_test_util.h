// Test doubles for scheduler tests: a backend that records every batch and
// can be blocked or made to fail on demand, a tracker of task completions,
// and an observer that records its calls.
//
// Thread-safety: all three are thread-safe (they are called from lane
// threads while the test thread inspects them).
#ifndef CONV1D_TESTS_CORE_SCHEDULER_TEST_UTIL_H_
#define CONV1D_TESTS_CORE_SCHEDULER_TEST_UTIL_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/core/backend.h"
#include "server/core/fake_clock.h"
#include "server/core/observer.h"
#include "server/core/task.h"

namespace conv1d::testing {

// Tasks in these tests carry a tag instead of real tensors: the tag is
// stored as the (never dereferenced) x pointer, so the backend can tell
// which task each segment belongs to.
inline uint64_t TagOf(const ConvSegment& s) {
  return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(s.x.data));
}

struct RecordedSegment {
  uint64_t tag;
  int64_t batch;
  int64_t seqlen;
};
struct RecordedBatch {
  int lane;
  BatchKey key;
  std::vector<RecordedSegment> segments;
};

class RecordingBackend final : public Backend {
 public:
  // `lane_devices`: Backend::LaneDevice of each lane (empty: -1 for all).
  explicit RecordingBackend(int lanes = 1, std::vector<int32_t> lane_devices = {})
      : lanes_(lanes), lane_devices_(std::move(lane_devices)) {}

  const char* name() const override { return "recording"; }
  std::vector<std::string> devices() const override { return {"fake"}; }
  int num_lanes() const override { return lanes_; }
  int32_t LaneDevice(int lane) const override {
    return lane_devices_.empty() ? -1 : lane_devices_[lane];
  }

  absl::Status Health() const override {
    absl::MutexLock lock(&health_mu_);
    return health_;
  }
  bool LaneAvailable(int lane) const override {
    absl::MutexLock lock(&health_mu_);
    return unavailable_lanes_.count(lane) == 0;
  }
  void SetLaneAvailable(int lane, bool available) {
    absl::MutexLock lock(&health_mu_);
    if (available) {
      unavailable_lanes_.erase(lane);
    } else {
      unavailable_lanes_.insert(lane);
    }
  }
  void SetHealth(absl::Status status) {
    absl::MutexLock lock(&health_mu_);
    health_ = std::move(status);
  }

  absl::Status RunBatch(int lane, const BatchKey& key,
                        absl::Span<ConvSegment* const> segments,
                        BatchStats* stats) override {
    FakeClock* clock;
    absl::Duration busy;
    absl::Status status;
    {
      absl::MutexLock lock(&mu_);
      RecordedBatch b{lane, key, {}};
      for (ConvSegment* s : segments) {
        b.segments.push_back({TagOf(*s), s->batch, s->seqlen});
      }
      batches_.push_back(std::move(b));
      ++entered_;
      auto unblocked = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !blocked_;
      };
      mu_.Await(absl::Condition(&unblocked));
      clock = advance_clock_;
      busy = busy_;
      status = fail_;
    }
    stats->launches = 1;
    // Outside our lock: advancing wakes waiters under the scheduler's lock.
    if (clock != nullptr) clock->Advance(busy);
    return status;
  }

  // While blocked, RunBatch records its batch and then waits.
  void Block() {
    absl::MutexLock lock(&mu_);
    blocked_ = true;
  }
  void Unblock() {
    absl::MutexLock lock(&mu_);
    blocked_ = false;
  }
  // Every later RunBatch returns `status` (OK to stop failing).
  void FailWith(absl::Status status) {
    absl::MutexLock lock(&mu_);
    fail_ = std::move(status);
  }
  // Each RunBatch advances `clock` by `busy`, so batch timings differ.
  void AdvanceClockPerBatch(FakeClock* clock, absl::Duration busy) {
    absl::MutexLock lock(&mu_);
    advance_clock_ = clock;
    busy_ = busy;
  }
  // Waits until RunBatch has been entered `n` times in total.
  bool AwaitEntered(int n) {
    absl::MutexLock lock(&mu_);
    auto done = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return entered_ >= n;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&done), absl::Seconds(30));
  }
  std::vector<RecordedBatch> batches() const {
    absl::MutexLock lock(&mu_);
    return batches_;
  }

 private:
  const int lanes_;
  const std::vector<int32_t> lane_devices_;
  mutable absl::Mutex health_mu_;
  absl::Status health_ ABSL_GUARDED_BY(health_mu_);
  std::set<int> unavailable_lanes_ ABSL_GUARDED_BY(health_mu_);
  mutable absl::Mutex mu_;
  std::vector<RecordedBatch> batches_ ABSL_GUARDED_BY(mu_);
  int entered_ ABSL_GUARDED_BY(mu_) = 0;
  bool blocked_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status fail_ ABSL_GUARDED_BY(mu_);
  FakeClock* advance_clock_ ABSL_GUARDED_BY(mu_) = nullptr;
  absl::Duration busy_ ABSL_GUARDED_BY(mu_);
};

struct Outcome {
  int calls = 0;
  absl::Status status;
  TaskTimings timings;
};

// Records every on_done call by tag; counts repeated calls so tests can
// assert "exactly once".
class Completions {
 public:
  absl::AnyInvocable<void(const absl::Status&, const TaskTimings&)> Callback(
      uint64_t tag) {
    return [this, tag](const absl::Status& s, const TaskTimings& t) {
      absl::MutexLock lock(&mu_);
      Outcome& o = outcomes_[tag];
      ++o.calls;
      o.status = s;
      o.timings = t;
      ++total_calls_;
      order_.push_back(tag);
    };
  }
  bool AwaitCalls(int64_t n) {
    absl::MutexLock lock(&mu_);
    auto done = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return total_calls_ >= n;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&done), absl::Seconds(60));
  }
  int64_t total_calls() const {
    absl::MutexLock lock(&mu_);
    return total_calls_;
  }
  Outcome Get(uint64_t tag) const {
    absl::MutexLock lock(&mu_);
    auto it = outcomes_.find(tag);
    return it == outcomes_.end() ? Outcome{} : it->second;
  }
  std::map<uint64_t, Outcome> All() const {
    absl::MutexLock lock(&mu_);
    return outcomes_;
  }
  std::vector<uint64_t> Order() const {
    absl::MutexLock lock(&mu_);
    return order_;
  }

 private:
  mutable absl::Mutex mu_;
  std::map<uint64_t, Outcome> outcomes_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> order_ ABSL_GUARDED_BY(mu_);
  int64_t total_calls_ ABSL_GUARDED_BY(mu_) = 0;
};

// A key per `dim`, so tests can make distinct keys cheaply.
inline BatchKey KeyWithDim(int64_t dim, Op op = Op::kForward) {
  BatchKey k;
  k.op = op;
  k.dim = dim;
  k.width = 4;
  return k;
}

// A task tagged `tag` whose bytes() is `bytes` (all in x, plus nothing else).
inline std::unique_ptr<Task> MakeTask(uint64_t tag, const BatchKey& key,
                                      Completions* done, int64_t batch = 1,
                                      int64_t seqlen = 16,
                                      int64_t bytes = 1024) {
  auto t = std::make_unique<Task>();
  t->id = tag;
  t->key = key;
  t->segment.batch = batch;
  t->segment.seqlen = seqlen;
  t->segment.x.data = reinterpret_cast<const void*>(static_cast<uintptr_t>(tag));
  t->segment.x.bytes = bytes;
  t->on_done = done->Callback(tag);
  return t;
}

class RecordingObserver final : public Observer {
 public:
  struct BatchDone {
    int lane;
    BatchKey key;
    int32_t requests;
    int64_t sequences;
    int64_t bytes;
    absl::Duration busy;
  };
  void OnRejected(RejectReason reason) override {
    absl::MutexLock lock(&mu_);
    ++rejected_[reason];
  }
  void OnQueueDepth(const std::string& family, int64_t depth) override {
    absl::MutexLock lock(&mu_);
    depths_[family].push_back(depth);
  }
  void OnTaskDequeued(const BatchKey& key, absl::Duration queue_time) override {
    absl::MutexLock lock(&mu_);
    queue_times_.push_back(queue_time);
  }
  void OnBatchDone(int lane, const BatchKey& key, int32_t requests,
                   int64_t sequences, int64_t bytes, const BatchStats& stats,
                   absl::Duration busy) override {
    absl::MutexLock lock(&mu_);
    batches_.push_back({lane, key, requests, sequences, bytes, busy});
  }
  void OnWeightsChanged(int64_t sets, int64_t bytes) override {
    absl::MutexLock lock(&mu_);
    weights_.emplace_back(sets, bytes);
  }

  int rejected(RejectReason r) const {
    absl::MutexLock lock(&mu_);
    auto it = rejected_.find(r);
    return it == rejected_.end() ? 0 : it->second;
  }
  std::vector<int64_t> depths(const std::string& family) const {
    absl::MutexLock lock(&mu_);
    auto it = depths_.find(family);
    return it == depths_.end() ? std::vector<int64_t>{} : it->second;
  }
  std::vector<absl::Duration> queue_times() const {
    absl::MutexLock lock(&mu_);
    return queue_times_;
  }
  std::vector<BatchDone> batches() const {
    absl::MutexLock lock(&mu_);
    return batches_;
  }
  std::vector<std::pair<int64_t, int64_t>> weights() const {
    absl::MutexLock lock(&mu_);
    return weights_;
  }

 private:
  mutable absl::Mutex mu_;
  std::map<RejectReason, int> rejected_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::vector<int64_t>> depths_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::Duration> queue_times_ ABSL_GUARDED_BY(mu_);
  std::vector<BatchDone> batches_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<int64_t, int64_t>> weights_ ABSL_GUARDED_BY(mu_);
};

}  // namespace conv1d::testing

#endif  // CONV1D_TESTS_CORE_SCHEDULER_TEST_UTIL_H_
