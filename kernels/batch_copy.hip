// Batched device copy (see batch_copy.h): one block per chunk, 16-byte
// vectors with every load of a thread issued before its stores.
#include "kernels/batch_copy.h"

#include <algorithm>

namespace conv1d::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kVecPerThread =
    static_cast<int>(kBatchCopyChunkBytes / 16 / kThreads);  // 4
static_assert(kVecPerThread * 16 * kThreads == kBatchCopyChunkBytes,
              "a chunk is one pass of the block");
constexpr int32_t kMaxGrid = 65535;

__global__ void __launch_bounds__(kThreads) batch_copy_kernel(const BatchCopyChunk* table,
                                                              int32_t count) {
  for (int32_t c = blockIdx.x; c < count; c += gridDim.x) {
    const BatchCopyChunk ch = table[c];
    const uintptr_t align = reinterpret_cast<uintptr_t>(ch.src) |
                            reinterpret_cast<uintptr_t>(ch.dst) |
                            static_cast<uintptr_t>(ch.bytes);
    if ((align & 15) == 0) {
      const int4* src = static_cast<const int4*>(ch.src);
      int4* dst = static_cast<int4*>(ch.dst);
      const int n = static_cast<int>(ch.bytes / 16);
      int4 v[kVecPerThread];
#pragma unroll
      for (int u = 0; u < kVecPerThread; ++u) {
        const int k = threadIdx.x + u * kThreads;
        if (k < n) v[u] = src[k];
      }
#pragma unroll
      for (int u = 0; u < kVecPerThread; ++u) {
        const int k = threadIdx.x + u * kThreads;
        if (k < n) dst[k] = v[u];
      }
    } else {
      const unsigned char* src = static_cast<const unsigned char*>(ch.src);
      unsigned char* dst = static_cast<unsigned char*>(ch.dst);
      for (int64_t k = threadIdx.x; k < ch.bytes; k += kThreads) dst[k] = src[k];
    }
  }
}

}  // namespace

bool BatchCopyAppend(BatchCopyChunk* table, int32_t capacity, int32_t* count,
                     const void* src, void* dst, int64_t bytes) {
  const int64_t need = BatchCopyChunksFor(bytes);
  if (need > static_cast<int64_t>(capacity) - *count) return false;
  const char* s = static_cast<const char*>(src);
  char* d = static_cast<char*>(dst);
  for (int64_t off = 0; off < bytes; off += kBatchCopyChunkBytes) {
    table[(*count)++] = {s + off, d + off, std::min(kBatchCopyChunkBytes, bytes - off)};
  }
  return true;
}

hipError_t BatchCopyRun(const BatchCopyChunk* device_table, int32_t count,
                        hipStream_t stream) {
  if (count < 0 || (count > 0 && device_table == nullptr)) return hipErrorInvalidValue;
  if (count == 0) return hipSuccess;
  const int32_t grid = std::min(count, kMaxGrid);
  batch_copy_kernel<<<grid, kThreads, 0, stream>>>(device_table, count);
  return hipGetLastError();
}

}  // namespace conv1d::kernels
