// Non-owning views of tensor payloads used throughout the core, and where
// their bytes live.
//
// A TensorView points at bytes owned by someone else (a received gRPC
// message, a registered weight set, a client's shared-memory region, a
// decode session's state slot); `owner` keeps that storage alive when the
// view outlives its creator. OutputView points at storage the backend writes
// into (for the gRPC frontend: the response's bytes). Each view carries its
// Placement: which kind of memory the bytes are in, and for regions the
// region and offset. Backends decide how to move a tensor from its
// placement (stage it, DMA it in place, or let the kernel read it where it
// is) instead of guessing it back from the pointer.
//
// Views are plain values; the bytes they point to follow the owner's
// thread-safety rules (inputs are read-only once a task is submitted; each
// output has exactly one writer).
#ifndef CONV1D_SERVER_CORE_TENSOR_H_
#define CONV1D_SERVER_CORE_TENSOR_H_

#include <cstdint>
#include <memory>

#include "absl/container/inlined_vector.h"
#include "absl/types/span.h"
#include "server/core/dtype.h"

namespace conv1d {

using Shape = absl::InlinedVector<int64_t, 4>;

// Product of the dimensions; 1 for a scalar. REQUIRES: every dim >= 0 and the
// product fits in int64 (validation checks this before a view is built).
int64_t NumElements(absl::Span<const int64_t> shape);

// The kinds of memory a tensor's bytes can be in. Host kinds are readable by
// the CPU through `data`; device kinds hold a device address in `data` and
// name their device.
enum class MemoryKind : uint8_t {
  // Ordinary host memory: a received message's bytes or a heap buffer.
  kHostHeap = 0,
  // The backend's page-locked host pool (HostBufferProvider memory): moves
  // by DMA, or is read over the bus by a kernel, with no staging copy.
  kHostPinned = 1,
  // A client's registered system shared-memory region, page-locked once at
  // registration where the backend can.
  kSharedHost = 2,
  // Device memory shared by a co-located process (CUDA/HIP IPC).
  kSharedDevice = 3,
  // Device memory the server owns: registered weights, a decode session's
  // state slot.
  kDeviceOwned = 4,
};

inline constexpr int kNumMemoryKinds = 5;

constexpr const char* MemoryKindName(MemoryKind k) {
  switch (k) {
    case MemoryKind::kHostHeap: return "host_heap";
    case MemoryKind::kHostPinned: return "host_pinned";
    case MemoryKind::kSharedHost: return "shared_host";
    case MemoryKind::kSharedDevice: return "shared_device";
    case MemoryKind::kDeviceOwned: return "device_owned";
  }
  return "?";
}

constexpr bool IsDeviceMemory(MemoryKind k) {
  return k == MemoryKind::kSharedDevice || k == MemoryKind::kDeviceOwned;
}

// Where a view's bytes are. `region` and `offset` name the bytes inside a
// registered region (0 for host heap and pool memory); `device` is the
// device index for device kinds.
struct Placement {
  MemoryKind kind = MemoryKind::kHostHeap;
  uint64_t region = 0;
  int64_t offset = 0;
  int32_t device = -1;

  static Placement HostHeap() { return Placement{}; }
  static Placement HostPinned() { return Placement{MemoryKind::kHostPinned}; }
  bool on_device() const { return IsDeviceMemory(kind); }
  // Page-locked host memory: moves by DMA with no staging copy.
  bool page_locked() const {
    return kind == MemoryKind::kHostPinned || kind == MemoryKind::kSharedHost;
  }
};

struct TensorView {
  DType dtype = DType::kF32;
  Shape shape;
  const void* data = nullptr;  // null means "absent" for optional tensors
  int64_t bytes = 0;
  std::shared_ptr<const void> owner;  // may be null when lifetime is external
  // Non-zero when the bytes are immutable for as long as `owner` lives and
  // are known by this id across requests (registered weight sets). Backends
  // may keep device copies keyed by it; ids are never reused.
  uint64_t cache_id = 0;
  Placement where;

  bool present() const { return data != nullptr; }
  int64_t num_elements() const { return NumElements(shape); }
};

struct OutputView {
  DType dtype = DType::kF32;
  Shape shape;
  void* data = nullptr;  // null means "not requested"
  int64_t bytes = 0;
  Placement where;

  bool present() const { return data != nullptr; }
  int64_t num_elements() const { return NumElements(shape); }
};

}  // namespace conv1d

#endif  // CONV1D_SERVER_CORE_TENSOR_H_
