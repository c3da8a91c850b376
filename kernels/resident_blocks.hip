// ResidentBlocks (conv1d_internal.h): how many blocks of a kernel instance
// the current device holds at once, from the runtime's occupancy query,
// for the planner (the channel-last forward's steps) and the launchers (a
// cooperative channel-last backward).
//
// Host code. Thread-safe: each thread keeps its own cache (which
// SetResidentBlocksForTesting overrides for its own thread only).
#include <vector>

#include "kernels/bwd_common.h"
#include "kernels/fwd_common.h"

namespace conv1d::kernels::detail {
namespace {

template <class T>
int KernelBlocksPerSm(ResidentKernel kernel, int32_t width) {
  switch (kernel) {
    case ResidentKernel::kFwdCl: return dev::FwdClBlocksPerSm<T>(width);
    case ResidentKernel::kBwdClCooperative: return dev::BwdClBlocksPerSm<T>(width);
  }
  return 0;
}

// 0 when the runtime cannot say (its error cleared).
int64_t Query(int device, ResidentKernel kernel, ScalarType type, int32_t width) {
  int sms = 0;
  if (hipDeviceGetAttribute(&sms, hipDeviceAttributeMultiprocessorCount, device) != hipSuccess) {
    (void)hipGetLastError();
    return 0;
  }
  if (kernel == ResidentKernel::kBwdClCooperative) {
    int coop = 0;
    if (hipDeviceGetAttribute(&coop, hipDeviceAttributeCooperativeLaunch, device) != hipSuccess) {
      (void)hipGetLastError();
      return 0;
    }
    if (coop == 0) return 0;
  }
  int per_sm = 0;
  switch (type) {
    case ScalarType::kF32: per_sm = KernelBlocksPerSm<dev::F32>(kernel, width); break;
    case ScalarType::kF16: per_sm = KernelBlocksPerSm<dev::F16>(kernel, width); break;
    case ScalarType::kBF16: per_sm = KernelBlocksPerSm<dev::BF16>(kernel, width); break;
  }
  if (per_sm == 0) (void)hipGetLastError();
  return static_cast<int64_t>(sms) * per_sm;
}

struct Entry {
  int device;
  ResidentKernel kernel;
  ScalarType type;
  int32_t width;
  int64_t blocks;
};

// This thread's entry for the current device, kernel, type and width
// (added with `blocks` from Query when absent); null when the runtime
// cannot name the current device.
Entry* Find(ResidentKernel kernel, ScalarType type, int32_t width) {
  thread_local std::vector<Entry> cache;
  int device = 0;
  if (hipGetDevice(&device) != hipSuccess) {
    (void)hipGetLastError();
    return nullptr;
  }
  for (Entry& e : cache) {
    if (e.device == device && e.kernel == kernel && e.type == type && e.width == width) return &e;
  }
  cache.push_back({device, kernel, type, width, Query(device, kernel, type, width)});
  return &cache.back();
}

}  // namespace

int64_t ResidentBlocks(ResidentKernel kernel, ScalarType type, int32_t width) {
  const Entry* e = Find(kernel, type, width);
  return e == nullptr ? 0 : e->blocks;
}

int64_t SetResidentBlocksForTesting(ResidentKernel kernel, ScalarType type, int32_t width, int64_t blocks) {
  Entry* e = Find(kernel, type, width);
  if (e == nullptr) return 0;
  const int64_t before = e->blocks;
  e->blocks = blocks;
  return before;
}

}  // namespace conv1d::kernels::detail
