// Batched memory copy on the device: one launch moves a list of byte ranges,
// each from any address the device can read (device memory, or page-locked
// host memory mapped into its address space) to any address it can write.
//
// The GPU backend uses it to gather a fused batch's small request tensors
// straight from the page-locked host pool into the lane's device buffer, and
// to scatter small outputs back, in one launch per direction instead of a
// staging memcpy or one DMA per tensor (each DMA costs a few microseconds of
// runtime time; the launch reads the bus at close to DMA bandwidth).
//
// Host side: BatchCopyAppend() cuts ranges into chunks of at most
// kBatchCopyChunkBytes into a caller-owned table; BatchCopyRun() enqueues
// the launch over a table the device can read. Chunks whose addresses and
// length are 16-byte aligned move by 16-byte vectors; others byte by byte.
//
// Thread-safety: reentrant; the table must stay unchanged and readable until
// the launch has finished on `stream`.
#ifndef CONV1D_KERNELS_BATCH_COPY_H_
#define CONV1D_KERNELS_BATCH_COPY_H_

#include <cstdint>

#include "kernels/gpu_compat.h"

namespace conv1d::kernels {

struct BatchCopyChunk {
  const void* src;
  void* dst;
  int64_t bytes;
};

inline constexpr int64_t kBatchCopyChunkBytes = int64_t{16} << 10;

// Number of chunks a range of `bytes` takes (0 for bytes <= 0).
inline int64_t BatchCopyChunksFor(int64_t bytes) {
  return bytes <= 0 ? 0 : (bytes + kBatchCopyChunkBytes - 1) / kBatchCopyChunkBytes;
}

// Appends the chunks of [src, src + bytes) -> dst to table[*count ..] and
// advances *count. Returns false (and appends nothing) when they would not
// fit in `capacity` entries.
bool BatchCopyAppend(BatchCopyChunk* table, int32_t capacity, int32_t* count,
                     const void* src, void* dst, int64_t bytes);

// Enqueues the copy of table[0 .. count) on `stream` (nothing for count 0).
// `device_table` is the table's address as the device sees it. Returns the
// runtime's launch error code.
hipError_t BatchCopyRun(const BatchCopyChunk* device_table, int32_t count,
                        hipStream_t stream);

}  // namespace conv1d::kernels

#endif  // CONV1D_KERNELS_BATCH_COPY_H_
