#include "server/core/host_buffers.h"

#include <new>

namespace conv1d {

HostBuffer HeapHostBuffers::Allocate(int64_t bytes) {
  return HostBuffer{
      std::shared_ptr<void>(::operator new(static_cast<size_t>(bytes > 0 ? bytes : 1)),
                            [](void* p) { ::operator delete(p); }),
      MemoryKind::kHostHeap};
}

}  // namespace conv1d
