// SharedMemoryRegistry: the system shared-memory regions clients register
// (Open Inference Protocol SystemSharedMemoryRegister), so that request
// tensors are read from, and outputs written to, memory the client process
// shares with the server instead of crossing gRPC.
//
// A region is a byte range [offset, offset + byte_size) of a POSIX
// shared-memory object (`key`, the shm_open name), mapped read-write once at
// registration. Requests name a region and a range inside it; Resolve checks
// the range against the region on every request and hands out a span that
// keeps the mapping alive, with Placement kSharedHost and the region's id.
//
// Lifetime rules:
//   - A span carries two references: `data` keeps the mapping alive (memory
//     safety: a view never points at unmapped bytes), and `lease` counts the
//     request as using the region. A frontend releases the leases of a call
//     before it answers the client, so that a client that got its answer can
//     unregister at once, while the lane finishing the call may still hold
//     the mapping for a moment.
//   - Unregister of a region that an in-flight request still holds fails
//     with FAILED_PRECONDITION naming the region and how many requests hold
//     it; the client retries once its requests have finished. It never
//     waits and never unmaps memory a request is using. Unregister with an
//     empty name releases every region not in use and fails the same way
//     naming the ones left.
//   - A key that does not exist is NOT_FOUND at registration. An object
//     smaller than offset + byte_size is INVALID_ARGUMENT at registration,
//     and, should the owner shrink it later (ftruncate), every Resolve
//     re-checks its size and answers FAILED_PRECONDITION instead of letting
//     the server touch unbacked pages. An object unlinked by its owner after
//     registration stays valid: the mapping keeps the memory.
//   - Mappings are released when the last span of an unregistered region is
//     released, and all of them when the registry is destroyed.
// Placement: a backend moves kSharedHost bytes as page-locked memory (DMA,
// or read in place by its kernels), so spans are kSharedHost only for
// regions that the registry's HostMemoryPinner page-locked at registration
// (and unlocks before unmapping). Without a pinner, or when pinning fails,
// spans are kHostHeap (still naming the region and offset) and backends
// stage them like any pageable memory.
//
// Any caller that may register may map any shared-memory object the server
// process can open: run the server as a user that can open only what its
// clients may hand it (as with Triton).
//
// Used by the protocol frontends (oip_service.cc, conv1d_service.cc).
// Thread-safety: every method is thread-safe; spans may outlive the
// registry.
#ifndef CONV1D_SERVER_CORE_SHM_REGISTRY_H_
#define CONV1D_SERVER_CORE_SHM_REGISTRY_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "server/core/tensor.h"

namespace conv1d {

// Page-locks host memory for a backend's DMA engines and kernels (e.g.
// cudaHostRegister / hipHostRegister). Thread-safe.
class HostMemoryPinner {
 public:
  virtual ~HostMemoryPinner() = default;
  // OK when [data, data + bytes) is now page-locked.
  virtual absl::Status Pin(void* data, int64_t bytes) = 0;
  // Undoes a successful Pin of `data`.
  virtual void Unpin(void* data) = 0;
};

struct SharedMemoryRegistryOptions {
  // Regions registered at once; 1 .. 65536. Register answers
  // RESOURCE_EXHAUSTED past it.
  int32_t max_regions = 1024;
  // Page-locks each region at registration; null: none is (see Placement
  // above).
  std::shared_ptr<HostMemoryPinner> pinner;
};

struct SharedRegionInfo {
  std::string name;
  std::string key;
  int64_t offset = 0;     // bytes into the shared-memory object
  int64_t byte_size = 0;  // bytes of the region
  uint64_t id = 0;        // Placement::region of views into it
  int64_t in_use = 0;     // leases currently held by requests
  bool page_locked = false;  // pinned at registration: spans are kSharedHost
};

// Bytes inside a registered region. `data` holds the mapping alive; null
// `data` means the span is empty. `lease` marks the region in use (see the
// lifetime rules) until it is released.
struct SharedSpan {
  std::shared_ptr<void> data;
  int64_t bytes = 0;
  Placement where;  // kSharedHost, the region's id, the offset in the region
  std::shared_ptr<void> lease;
};

class SharedMemoryRegistry {
 public:
  // INVALID_ARGUMENT naming the option when it is out of range.
  static absl::StatusOr<std::unique_ptr<SharedMemoryRegistry>> Create(
      const SharedMemoryRegistryOptions& options);
  ~SharedMemoryRegistry();

  // Maps `byte_size` bytes at `offset` of the object `key` under `name`.
  // INVALID_ARGUMENT for an empty or overlong name, a malformed key, a zero
  // size or a range past the object's end; ALREADY_EXISTS when the name is
  // taken; NOT_FOUND when the key does not exist; PERMISSION_DENIED when it
  // cannot be opened read-write; RESOURCE_EXHAUSTED past max_regions.
  absl::Status Register(absl::string_view name, absl::string_view key, int64_t offset,
                        int64_t byte_size);

  // See the lifetime rules above. NOT_FOUND when `name` is not registered.
  absl::Status Unregister(absl::string_view name);

  // The regions (all of them when `name` is empty), by name. NOT_FOUND when
  // a named region is not registered.
  absl::StatusOr<std::vector<SharedRegionInfo>> Status(absl::string_view name) const;

  // `bytes` bytes at `offset` inside region `name`. `what` names the tensor
  // in messages ("input 'x'"). NOT_FOUND when the region is not registered;
  // INVALID_ARGUMENT when the range is negative or leaves the region;
  // FAILED_PRECONDITION when the object has shrunk under the region.
  absl::StatusOr<SharedSpan> Resolve(absl::string_view name, int64_t offset,
                                     int64_t bytes, absl::string_view what) const;

 private:
  struct Region;
  explicit SharedMemoryRegistry(const SharedMemoryRegistryOptions& options)
      : options_(options) {}

  const SharedMemoryRegistryOptions options_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Region>, std::less<>> regions_
      ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace conv1d

#endif  // CONV1D_SERVER_CORE_SHM_REGISTRY_H_
