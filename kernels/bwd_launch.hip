// The backward's launch (LaunchBwdChannelFirst / LaunchBwdChannelLast): the
// kernel family of each tile range the planner made, then the dweight
// reduction when any segment wrote partials. On CUDA each family after the
// first (the 16-bit persistent short-row kernel aside) and the reduction
// are dependent launches (LaunchKernel in conv1d_device.h): the next one's
// blocks take the SMs the one before frees in its last wave; the families
// write disjoint tiles, and the reduction waits for the partials. A
// channel-last launch of one wave (every block resident) is cooperative and
// sums its own partials after a grid barrier, with no second launch.
#include "kernels/reduce_dw.h"

namespace conv1d::kernels {
namespace {

using namespace dev;

template <class T>
hipError_t LaunchCf(const KParams& k0, const Conv1dPlanInfo& plan, hipStream_t s) {
  if (!detail::FastWidth(k0.width)) return hipErrorInvalidValue;
  KParams k = k0;
  // Launches `launch` over [begin, end) when the range is not empty.
  auto range = [&](int64_t begin, int64_t end, hipError_t (*launch)(const KParams&, hipStream_t)) {
    if (end <= begin) return hipSuccess;
    k.tile_begin = begin;
    k.total_tiles = end;
    const hipError_t e = launch(k, s);
    k.after_previous = true;  // the next family may overlap this one's tail
    return e;
  };
  hipError_t e = range(plan.long_tile_begin, plan.long_tile_end, &LaunchBwdCfLong<T>);
  if (e != hipSuccess) return e;
  if constexpr (detail::BwdShortPersist(sizeof(typename T::S))) {
    e = range(plan.short_tile_begin, plan.short_tile_end, &LaunchBwdCfRun<T>);
  } else {
    e = range(plan.short_tile_begin, plan.short_tile_end, &LaunchBwdCfShort<T>);
  }
  if (e != hipSuccess) return e;
  e = range(plan.stream_tile_begin, plan.stream_tile_end, &LaunchBwdCfStream<T>);
  if (e != hipSuccess) return e;
  if constexpr (sizeof(typename T::S) == 2) {
    e = range(plan.walk_tile_begin, plan.walk_tile_end, &LaunchBwdCfWalk<T>);
    if (e != hipSuccess) return e;
  }
  if (!plan.reduce_dw) return hipGetLastError();
  return LaunchReduceDw(k0, plan.max_partials, s);
}

// One wave of blocks (every tile's block resident at once) sums its own
// partials after a grid barrier; more take reduce_dw_kernel after them, as
// does a launch the runtime refuses to make cooperative (a device shared
// under a limit on its multiprocessors holds fewer blocks than it has).
template <class T>
hipError_t LaunchCl(const KParams& k, const Conv1dPlanInfo& plan, hipStream_t s) {
  if (!detail::FastWidth(k.width)) return hipErrorInvalidValue;
  if (plan.reduce_dw && k.total_tiles <= detail::ResidentBlocks(detail::ResidentKernel::kBwdClCooperative,
                                                                static_cast<ScalarType>(T::kId), k.width)) {
    KParams fused = k;
    fused.fused_reduce = ReduceDwLanes(k, plan.max_partials) ? 2 : 1;
    if (LaunchBwdCl<T>(fused, s) == hipSuccess) return hipSuccess;
    (void)hipGetLastError();  // nothing was launched
  }
  const hipError_t e = LaunchBwdCl<T>(k, s);
  if (e != hipSuccess) return e;
  return LaunchReduceDw(k, plan.max_partials, s);
}

}  // namespace

namespace detail {

int32_t LaunchBwdChannelFirst(const Conv1dProblem& p, const Conv1dPlanInfo& plan,
                              const Conv1dSegment* segs, void* ws, Stream s) {
  const KParams k = MakeParams(p, plan, segs, ws);
  const auto st = static_cast<hipStream_t>(s);
  switch (p.x_type) {
    case ScalarType::kF32: return LaunchCf<F32>(k, plan, st);
    case ScalarType::kF16: return LaunchCf<F16>(k, plan, st);
    case ScalarType::kBF16: return LaunchCf<BF16>(k, plan, st);
  }
  return hipErrorInvalidValue;
}

int32_t LaunchBwdChannelLast(const Conv1dProblem& p, const Conv1dPlanInfo& plan,
                             const Conv1dSegment* segs, void* ws, Stream s) {
  const KParams k = MakeParams(p, plan, segs, ws);
  const auto st = static_cast<hipStream_t>(s);
  switch (p.x_type) {
    case ScalarType::kF32: return LaunchCl<F32>(k, plan, st);
    case ScalarType::kF16: return LaunchCl<F16>(k, plan, st);
    case ScalarType::kBF16: return LaunchCl<BF16>(k, plan, st);
  }
  return hipErrorInvalidValue;
}

}  // namespace detail
}  // namespace conv1d::kernels
