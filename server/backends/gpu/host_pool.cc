#include "server/backends/gpu/host_pool.h"

#include <utility>

namespace conv1d::gpu {

HostPool::HostPool(void* region, int64_t bytes, std::function<void(int64_t)> on_use)
    : base_(static_cast<char*>(region)),
      bytes_(region == nullptr ? 0 : bytes),
      on_use_(std::move(on_use)) {
  absl::MutexLock lock(&mu_);
  class_of_.assign(static_cast<size_t>(bytes_ / kMinBlockBytes), -1);
}

int HostPool::ClassOf(int64_t bytes) {
  int c = 0;
  int64_t size = kMinBlockBytes;
  while (size < bytes && c < kClasses - 1) {
    size <<= 1;
    ++c;
  }
  return c;
}

void* HostPool::Allocate(int64_t bytes) {
  if (bytes <= 0) return nullptr;
  const int c = ClassOf(bytes);
  const int64_t size = kMinBlockBytes << c;
  if (size < bytes) return nullptr;
  absl::MutexLock lock(&mu_);
  char* p = nullptr;
  if (!free_[c].empty()) {
    p = free_[c].back();
    free_[c].pop_back();
  } else if (carved_ + size <= bytes_) {
    p = base_ + carved_;
    class_of_[static_cast<size_t>(carved_ / kMinBlockBytes)] = static_cast<int8_t>(c);
    carved_ += size;
  } else {
    ++misses_;
    return nullptr;
  }
  in_use_ += size;
  if (on_use_) on_use_(in_use_);
  return p;
}

void HostPool::Free(void* p) {
  if (p == nullptr) return;
  char* c = static_cast<char*>(p);
  absl::MutexLock lock(&mu_);
  const int cls = class_of_[static_cast<size_t>((c - base_) / kMinBlockBytes)];
  free_[cls].push_back(c);
  in_use_ -= kMinBlockBytes << cls;
  if (on_use_) on_use_(in_use_);
}

int64_t HostPool::bytes_in_use() const {
  absl::MutexLock lock(&mu_);
  return in_use_;
}

int64_t HostPool::misses() const {
  absl::MutexLock lock(&mu_);
  return misses_;
}

HostBuffer PooledHostBuffers::Allocate(int64_t bytes) {
  if (bytes > 0) {
    if (void* p = pool_->Allocate(bytes)) {
      return HostBuffer{std::shared_ptr<void>(p, [pool = pool_](void* q) { pool->Free(q); }),
                        MemoryKind::kHostPinned};
    }
    if (on_miss_) on_miss_(bytes);
  }
  return heap_.Allocate(bytes);
}

}  // namespace conv1d::gpu
