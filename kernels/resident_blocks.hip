// ResidentBlocks (conv1d_internal.h): how many blocks of a kernel instance
// the current device holds at once, from the runtime's occupancy query,
// for the planner (the channel-last forward's steps) and the launchers (a
// cooperative channel-last backward).
//
// Host code. Thread-safe: each thread keeps its own cache.
#include <vector>

#include "kernels/bwd_common.h"
#include "kernels/fwd_common.h"

namespace conv1d::kernels::detail {
namespace {

template <class T>
int BlocksPerSm(ResidentKernel kernel, int32_t width) {
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
    case ScalarType::kF32: per_sm = BlocksPerSm<dev::F32>(kernel, width); break;
    case ScalarType::kF16: per_sm = BlocksPerSm<dev::F16>(kernel, width); break;
    case ScalarType::kBF16: per_sm = BlocksPerSm<dev::BF16>(kernel, width); break;
  }
  if (per_sm == 0) (void)hipGetLastError();
  return static_cast<int64_t>(sms) * per_sm;
}

}  // namespace

int64_t ResidentBlocks(ResidentKernel kernel, ScalarType type, int32_t width) {
  struct Entry {
    int device;
    ResidentKernel kernel;
    ScalarType type;
    int32_t width;
    int64_t blocks;
  };
  thread_local std::vector<Entry> cache;
  int device = 0;
  if (hipGetDevice(&device) != hipSuccess) {
    (void)hipGetLastError();
    return 0;
  }
  for (const Entry& e : cache) {
    if (e.device == device && e.kernel == kernel && e.type == type && e.width == width) return e.blocks;
  }
  const int64_t blocks = Query(device, kernel, type, width);
  cache.push_back({device, kernel, type, width, blocks});
  return blocks;
}

}  // namespace conv1d::kernels::detail
