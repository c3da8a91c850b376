// Caches of labelled metric children (prometheus-cpp Counter/Gauge/Histogram
// pointers) so that a hook on the request path finds its series without
// taking a lock or building a label map.
//
// LazySlots<T, N>: a fixed table indexed by a small integer (method, lane,
// device, op×dtype). A filled slot is read with one acquire load; an empty
// slot is filled once under a mutex that only first uses ever take.
// LabelMap<T>: the fallback for keys outside the fixed tables (an unknown
// method name or family string); a reader lock per lookup, a writer lock on
// first creation. Both are thread-safe. The pointers they hand out are owned
// by the prometheus-cpp Family and stay valid while the Registry lives.
#ifndef CONV1D_SERVER_METRICS_LAZY_CHILDREN_H_
#define CONV1D_SERVER_METRICS_LAZY_CHILDREN_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace conv1d {

template <typename T, size_t N>
class LazySlots {
 public:
  static constexpr size_t kSize = N;

  // REQUIRES: i < N. `make` runs at most once per slot, under the slot
  // table's mutex, and must return a non-null pointer.
  template <typename Make>
  T* Get(size_t i, Make&& make) {
    T* p = slots_[i].load(std::memory_order_acquire);
    if (p != nullptr) return p;
    absl::MutexLock lock(&mu_);
    p = slots_[i].load(std::memory_order_relaxed);
    if (p == nullptr) {
      p = make();
      slots_[i].store(p, std::memory_order_release);
    }
    return p;
  }

 private:
  std::array<std::atomic<T*>, N> slots_{};
  absl::Mutex mu_;
};

template <typename T>
class LabelMap {
 public:
  template <typename Make>
  T* Get(const std::string& key, Make&& make) {
    {
      absl::ReaderMutexLock lock(&mu_);
      auto it = map_.find(key);
      if (it != map_.end()) return it->second;
    }
    absl::MutexLock lock(&mu_);
    auto [it, inserted] = map_.try_emplace(key, nullptr);
    if (inserted) it->second = make();
    return it->second;
  }

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, T*> map_ ABSL_GUARDED_BY(mu_);
};

}  // namespace conv1d

#endif  // CONV1D_SERVER_METRICS_LAZY_CHILDREN_H_
