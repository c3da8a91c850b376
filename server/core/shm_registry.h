// SharedMemoryRegistry: the shared-memory regions clients register (Open
// Inference Protocol SystemSharedMemoryRegister and CudaSharedMemoryRegister),
// so that request tensors are read from, and outputs written to, memory the
// client process shares with the server instead of crossing gRPC.
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
// Device regions: an export handle (cudaIpcMemHandle_t / hipIpcMemHandle_t
// bytes) of device memory a co-located process allocated, opened once at
// RegisterDevice by the registry's DeviceMemoryImporter on the named device
// and closed when the region goes (same lifetime rules as above). The
// region may claim at most the exported allocation's bytes. Spans are
// kSharedDevice on that device: the backend's kernels read and write them
// in place, and the host never touches them. Without an importer (the cpu
// and echo backends) RegisterDevice is FAILED_PRECONDITION.
//
// Ownership: a region belongs to the principal that registered it
// (SharedRegionInfo::owner; "" on a server that authenticates nobody, whose
// callers are all ""). Calls say who asks with a RegionUser:
//   - Resolve serves a region to its owner only: request tensors of one
//     principal never read or write another's region.
//   - Status and Unregister by name reach another principal's region only
//     for a user with all_regions (the operators).
//   - To anyone else another principal's region is answered exactly as one
//     that is not registered (NOT_FOUND, the same message), so a guessed
//     name tells nothing. A user with all_regions that resolves another's
//     region gets PERMISSION_DENIED instead: it sees the region in Status.
//   - Unregister with an empty name releases only the user's own regions,
//     whatever all_regions says.
//   - Names are one namespace for all principals: registering a name that
//     another principal holds is ALREADY_EXISTS.
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
#include "server/core/memory_access.h"
#include "server/core/tensor.h"

namespace conv1d {

// Which protocol call registered a region: system regions
// (SystemSharedMemoryRegister) and device regions (CudaSharedMemoryRegister)
// share one namespace of names, as in Triton, but each call family lists and
// unregisters only its own.
enum class RegionType : uint8_t { kSystem, kDevice };

// Who asks for a region (see Ownership above). The default is every caller
// of a server without authentication.
struct RegionUser {
  // The principal's name; regions it registers are its own.
  std::string principal;
  // Status lists, and Unregister by name removes, other principals' regions
  // too; Resolve still serves their bytes to their owners only.
  bool all_regions = false;
};

struct SharedMemoryRegistryOptions {
  // Regions registered at once; 1 .. 65536. Register answers
  // RESOURCE_EXHAUSTED past it.
  int32_t max_regions = 1024;
  // Page-locks each region at registration; null: none is (see Placement
  // above).
  std::shared_ptr<HostMemoryPinner> pinner;
  // Opens device regions; null: RegisterDevice answers FAILED_PRECONDITION
  // (the backend cannot use device memory).
  std::shared_ptr<DeviceMemoryImporter> importer;
};

struct SharedRegionInfo {
  RegionType type = RegionType::kSystem;
  std::string name;
  std::string owner;        // the registering principal (see Ownership)
  std::string key;          // system regions: the shm_open name
  int64_t offset = 0;     // bytes into the shared-memory object
  int64_t byte_size = 0;  // bytes of the region
  uint64_t id = 0;        // Placement::region of views into it
  int64_t in_use = 0;     // leases currently held by requests
  bool page_locked = false;  // pinned at registration: spans are kSharedHost
  std::string pin_error;     // why the pinner refused, when it did
  // Device regions: the export handle's bytes and the device it was opened
  // on (spans are kSharedDevice on that device).
  std::string raw_handle;
  int32_t device_id = -1;
};

// Bytes inside a registered region. `data` holds the mapping alive; null
// `data` means the span is empty. `lease` marks the region in use (see the
// lifetime rules) until it is released.
struct SharedSpan {
  std::shared_ptr<void> data;
  int64_t bytes = 0;
  // kSharedHost (kHostHeap when not pinned) or kSharedDevice with its
  // device, the region's id, the offset in the region.
  Placement where;
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
  // cannot be opened read-write; RESOURCE_EXHAUSTED past max_regions. The
  // region belongs to `owner`.
  absl::Status Register(absl::string_view name, absl::string_view key, int64_t offset,
                        int64_t byte_size, absl::string_view owner = {});

  // Opens the device memory `raw_handle` exports on device `device_id` and
  // registers its first `byte_size` bytes under `name`. INVALID_ARGUMENT
  // for a bad name, a zero size, a handle of the wrong size, a device the
  // backend does not use, or a size past the exported allocation;
  // ALREADY_EXISTS and RESOURCE_EXHAUSTED as Register; FAILED_PRECONDITION
  // when there is no importer or the runtime refuses the handle. Every
  // message names the region. The region belongs to `owner`.
  absl::Status RegisterDevice(absl::string_view name, absl::string_view raw_handle,
                              int32_t device_id, int64_t byte_size,
                              absl::string_view owner = {});
  // Whether RegisterDevice can succeed at all (an importer was given).
  bool serves_device_regions() const { return options_.importer != nullptr; }

  // See the lifetime and ownership rules above. Only regions of `type` that
  // `user` may reach are unregistered; NOT_FOUND naming `name` when it is
  // not a registered region of that type that `user` may reach.
  absl::Status Unregister(absl::string_view name, RegionType type = RegionType::kSystem,
                          const RegionUser& user = {});

  // The regions of `type` that `user` may reach (all of them when `name` is
  // empty), by name. NOT_FOUND naming `name` when a named region is not
  // registered as that type or `user` may not reach it.
  absl::StatusOr<std::vector<SharedRegionInfo>> Status(
      absl::string_view name, RegionType type = RegionType::kSystem,
      const RegionUser& user = {}) const;

  // `bytes` bytes at `offset` inside region `name`, which must be `user`'s.
  // `what` names the tensor in messages ("input 'x'"). NOT_FOUND when the
  // region is not registered or is another principal's (PERMISSION_DENIED
  // for a user with all_regions); INVALID_ARGUMENT when the range is
  // negative or leaves the region; FAILED_PRECONDITION when the object has
  // shrunk under the region. Regions of both types resolve by name.
  absl::StatusOr<SharedSpan> Resolve(absl::string_view name, int64_t offset,
                                     int64_t bytes, absl::string_view what,
                                     const RegionUser& user = {}) const;

 private:
  struct Region;
  explicit SharedMemoryRegistry(const SharedMemoryRegistryOptions& options)
      : options_(options) {}
  // ALREADY_EXISTS / RESOURCE_EXHAUSTED when `name` cannot be added now.
  absl::Status CheckRoomFor(absl::string_view name) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds a prepared region (checked again under the lock).
  absl::Status Insert(std::shared_ptr<Region> region);

  const SharedMemoryRegistryOptions options_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Region>, std::less<>> regions_
      ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace conv1d

#endif  // CONV1D_SERVER_CORE_SHM_REGISTRY_H_
