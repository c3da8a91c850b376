#include "server/backends/gpu/weight_cache.h"

#include "absl/strings/str_cat.h"
#include "server/backends/gpu/batch_layout.h"
#include "server/backends/gpu/gpu_runtime.h"

namespace conv1d::gpu {
namespace {
int64_t AlignUp(int64_t n) {
  return (n + kSlotAlignBytes - 1) / kSlotAlignBytes * kSlotAlignBytes;
}
}  // namespace

WeightCache::WeightCache(int device, void* region, int64_t region_bytes)
    : device_(device),
      region_(static_cast<char*>(region)),
      region_bytes_(region_bytes) {
  if (region_bytes_ > 0) free_[0] = region_bytes_;
}

absl::StatusOr<DeviceWeights> WeightCache::Get(const TensorView& weight,
                                               const TensorView& bias) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(weight.cache_id);
  if (it != entries_.end() && !it->second.owner.expired()) {
    const Entry& e = it->second;
    return DeviceWeights{region_ + e.offset,
                         e.bias_offset >= 0 ? region_ + e.bias_offset : nullptr};
  }
  if (it != entries_.end()) {  // stale entry of a set that is gone
    Release(it->second.offset, it->second.bytes);
    entries_.erase(it);
  }
  const int64_t w_bytes = AlignUp(weight.bytes);
  const int64_t total = w_bytes + (bias.present() ? AlignUp(bias.bytes) : 0);
  int64_t offset = Allocate(total);
  if (offset < 0 && ReclaimExpired() > 0) offset = Allocate(total);
  if (offset < 0) {
    return absl::NotFoundError(absl::StrCat(
        "weight cache of device ", device_, " is full (", in_use_, " of ",
        region_bytes_, " bytes in use)"));
  }
  absl::Status st = GpuStatus(hipSetDevice(device_), "hipSetDevice");
  if (st.ok()) {
    st = GpuStatus(hipMemcpy(region_ + offset, weight.data, weight.bytes,
                             hipMemcpyHostToDevice),
                   "uploading registered weights");
  }
  if (st.ok() && bias.present()) {
    st = GpuStatus(hipMemcpy(region_ + offset + w_bytes, bias.data, bias.bytes,
                             hipMemcpyHostToDevice),
                   "uploading registered bias");
  }
  if (!st.ok()) {
    Release(offset, total);
    return st;
  }
  Entry e;
  e.owner = weight.owner;
  e.offset = offset;
  e.bytes = total;
  e.bias_offset = bias.present() ? offset + w_bytes : -1;
  entries_[weight.cache_id] = e;
  return DeviceWeights{region_ + offset,
                       bias.present() ? region_ + offset + w_bytes : nullptr};
}

int64_t WeightCache::Allocate(int64_t bytes) {
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < bytes) continue;
    const int64_t offset = it->first;
    const int64_t rest = it->second - bytes;
    free_.erase(it);
    if (rest > 0) free_[offset + bytes] = rest;
    in_use_ += bytes;
    return offset;
  }
  return -1;
}

void WeightCache::Release(int64_t offset, int64_t bytes) {
  in_use_ -= bytes;
  auto [it, inserted] = free_.emplace(offset, bytes);
  // Merge with the following block, then with the preceding one.
  auto next = std::next(it);
  if (next != free_.end() && it->first + it->second == next->first) {
    it->second += next->second;
    free_.erase(next);
  }
  if (it != free_.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second == it->first) {
      prev->second += it->second;
      free_.erase(it);
    }
  }
}

int WeightCache::ReclaimExpired() {
  int n = 0;
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->second.owner.expired()) {
      Release(it->second.offset, it->second.bytes);
      entries_.erase(it++);
      ++n;
    } else {
      ++it;
    }
  }
  return n;
}

int64_t WeightCache::bytes_in_use() const {
  absl::MutexLock lock(&mu_);
  return in_use_;
}

int64_t WeightCache::entries() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(entries_.size());
}

}  // namespace conv1d::gpu
