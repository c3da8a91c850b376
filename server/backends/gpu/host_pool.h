// HostPool: a thread-safe block allocator over one caller-provided region of
// host memory (the GPU backend gives it page-locked memory allocated once at
// start). Request and response tensors that live in the region can be copied
// to and from the device by DMA directly, with no staging memcpy.
//
// Blocks come in power-of-two size classes from kMinBlockBytes up; a freed
// block goes back to its class's free list and is reused by the next request
// of that class (never split or merged), so steady traffic of similar shapes
// allocates nothing new. Allocate() returns null when the region has no room
// for the class (a miss, counted); callers fall back to ordinary heap
// memory. An optional listener hears every change of the bytes in use, under
// the pool's lock, so a gauge it sets always ends at the true value.
//
// Pure host code (no GPU runtime), unit-tested without a device.
// Thread-safety: every method may be called from any thread.
#ifndef CONV1D_SERVER_BACKENDS_GPU_HOST_POOL_H_
#define CONV1D_SERVER_BACKENDS_GPU_HOST_POOL_H_

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/core/host_buffers.h"

namespace conv1d::gpu {

class HostPool {
 public:
  static constexpr int64_t kMinBlockBytes = int64_t{4} << 10;
  static constexpr int kClasses = 40;

  // REQUIRES: `region` stays valid for the pool's lifetime; bytes >= 0.
  // `on_use`, when set, is called with the bytes in use after every
  // Allocate and Free that changes them, with the pool's lock held: it must
  // be quick and must not call back into the pool.
  HostPool(void* region, int64_t bytes,
           std::function<void(int64_t in_use)> on_use = nullptr);
  HostPool(const HostPool&) = delete;
  HostPool& operator=(const HostPool&) = delete;

  // A block of at least `bytes` (> 0) at an offset from the region's start
  // that is a multiple of kMinBlockBytes; null when the region is exhausted
  // for that size.
  void* Allocate(int64_t bytes);
  // REQUIRES: `p` came from Allocate() on this pool and is not yet freed.
  void Free(void* p);

  // True when [p, p + bytes) lies inside the region.
  bool Contains(const void* p, int64_t bytes) const {
    const char* c = static_cast<const char*>(p);
    return c >= base_ && bytes >= 0 && c + bytes <= base_ + bytes_;
  }

  int64_t capacity_bytes() const { return bytes_; }
  // Bytes handed out and not yet freed (whole blocks).
  int64_t bytes_in_use() const;
  // Allocate calls that found no room for their class (the region is
  // carved out and that class has no free block).
  int64_t misses() const;

 private:
  static int ClassOf(int64_t bytes);

  char* const base_;
  const int64_t bytes_;
  const std::function<void(int64_t)> on_use_;
  mutable absl::Mutex mu_;
  int64_t carved_ ABSL_GUARDED_BY(mu_) = 0;  // bump pointer into the region
  int64_t in_use_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t misses_ ABSL_GUARDED_BY(mu_) = 0;
  std::array<std::vector<char*>, kClasses> free_ ABSL_GUARDED_BY(mu_);
  // Size class of every carved block, by block index (offset / kMinBlockBytes
  // of its first byte); -1 for offsets that start no block.
  std::vector<int8_t> class_of_ ABSL_GUARDED_BY(mu_);
};

// The backend's HostBufferProvider: blocks of a HostPool (page-locked), heap
// memory when the pool has no room. Thread-safe; buffers keep the pool alive.
class PooledHostBuffers final : public HostBufferProvider {
 public:
  // `on_miss` (may be null) hears the size of every request the pool could
  // not serve.
  PooledHostBuffers(std::shared_ptr<HostPool> pool, std::function<void(int64_t bytes)> on_miss)
      : pool_(std::move(pool)), on_miss_(std::move(on_miss)) {}
  HostBuffer Allocate(int64_t bytes) override;
  bool page_locked() const override { return true; }

 private:
  const std::shared_ptr<HostPool> pool_;
  const std::function<void(int64_t)> on_miss_;
  HeapHostBuffers heap_;
};

}  // namespace conv1d::gpu

#endif  // CONV1D_SERVER_BACKENDS_GPU_HOST_POOL_H_
