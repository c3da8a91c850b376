// HostBufferProvider: where the frontends get host memory for request and
// response tensor bytes, and what kind of memory it is.
//
// The core owns this interface; a backend that moves bytes to a device
// implements it with its page-locked pool (so that tensors received there
// reach the device by DMA with no staging copy) and the server injects it
// into the frontends at start-up. Requests never call down into a backend
// for memory. HeapHostBuffers is the plain implementation (and the fallback
// of pools that run out).
//
// Thread-safety: implementations are thread-safe; buffers may be freed from
// any thread, also after the provider is gone.
#ifndef CONV1D_SERVER_CORE_HOST_BUFFERS_H_
#define CONV1D_SERVER_CORE_HOST_BUFFERS_H_

#include <cstdint>
#include <memory>
#include <utility>

#include "server/core/tensor.h"

namespace conv1d {

// Host memory for one tensor, freed when the last copy of `data` goes.
struct HostBuffer {
  HostBuffer() = default;
  // Implicit: plain memory is heap memory unless said otherwise.
  HostBuffer(std::shared_ptr<void> d, MemoryKind k = MemoryKind::kHostHeap)  // NOLINT
      : data(std::move(d)), kind(k) {}
  std::shared_ptr<void> data;  // never null
  MemoryKind kind = MemoryKind::kHostHeap;  // kHostHeap or kHostPinned
};

class HostBufferProvider {
 public:
  virtual ~HostBufferProvider() = default;
  // At least `bytes` (>= 0) bytes; never fails (falls back to heap memory).
  virtual HostBuffer Allocate(int64_t bytes) = 0;
  // True when receiving request tensors into this memory saves the backend
  // a copy (a page-locked pool).
  virtual bool page_locked() const = 0;
};

// Ordinary heap memory.
class HeapHostBuffers final : public HostBufferProvider {
 public:
  HostBuffer Allocate(int64_t bytes) override;
  bool page_locked() const override { return false; }
};

}  // namespace conv1d

#endif  // CONV1D_SERVER_CORE_HOST_BUFFERS_H_
