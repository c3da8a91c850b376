// WeightCache: device-resident copies of registered weight sets, one cache
// per device, carved out of a region of that device's memory pool.
//
// A registered set's TensorViews carry a non-zero `cache_id` and an `owner`
// that keeps the host bytes alive; the cache uploads weight and bias once,
// on first use, and keeps them until the owner is gone (the set was
// unregistered and no request holds it any more). Entries whose owner is
// gone are reclaimed lazily when space is needed; an entry whose owner
// lives is never evicted, because an in-flight batch may read it. When the
// region is full of live sets, Get returns NOT_FOUND and the caller stages
// the weights with the batch instead.
//
// Thread-safety: all methods are thread-safe (one mutex per cache; uploads
// are synchronous and happen under it, only on first use of a set).
#ifndef CONV1D_SERVER_BACKENDS_GPU_WEIGHT_CACHE_H_
#define CONV1D_SERVER_BACKENDS_GPU_WEIGHT_CACHE_H_

#include <cstdint>
#include <map>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/core/tensor.h"

namespace conv1d::gpu {

struct DeviceWeights {
  const void* weight = nullptr;
  const void* bias = nullptr;  // null when the set has no bias
};

class WeightCache {
 public:
  // `region` is `region_bytes` of device memory on `device` owned by the
  // caller; it must outlive the cache.
  WeightCache(int device, void* region, int64_t region_bytes);

  // Device copies of `weight` (and `bias` when present). REQUIRES:
  // weight.cache_id != 0. NOT_FOUND when the region has no room for it.
  absl::StatusOr<DeviceWeights> Get(const TensorView& weight,
                                    const TensorView& bias);

  int64_t bytes_in_use() const;
  int64_t region_bytes() const { return region_bytes_; }
  int64_t entries() const;

 private:
  struct Entry {
    std::weak_ptr<const void> owner;
    int64_t offset = 0;
    int64_t bytes = 0;
    int64_t bias_offset = -1;
  };
  // First-fit allocation in the region; -1 when no block is large enough.
  int64_t Allocate(int64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Release(int64_t offset, int64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Frees every entry whose owner is gone; returns how many.
  int ReclaimExpired() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int device_;
  char* const region_;
  const int64_t region_bytes_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, int64_t> free_ ABSL_GUARDED_BY(mu_);  // offset -> bytes
  int64_t in_use_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace conv1d::gpu

#endif  // CONV1D_SERVER_BACKENDS_GPU_WEIGHT_CACHE_H_
