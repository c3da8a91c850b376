// The forward's launch (LaunchFwdChannelFirst / LaunchFwdChannelLast): the
// kernel family of each tile range the planner made. On CUDA each family
// after the first is a dependent launch (LaunchKernel in conv1d_device.h):
// its blocks take the SMs the one before frees in its last wave (the
// families write disjoint tiles).
#include "kernels/fwd_common.h"

namespace conv1d::kernels {
namespace {

using namespace dev;

// Up to four kernels, each over its tile range (each kernel skips the
// tiles of the others): fwd_cf_short_kernel over the short range,
// fwd_cf_stream_kernel over the stream range, in 16-bit types
// fwd_cf_walk_kernel over the walk range, fwd_cf_kernel over the long
// range (fp32: from tile 0, which keeps its block loop as it was).
template <class T>
hipError_t LaunchCf(const KParams& k0, const Conv1dPlanInfo& plan, hipStream_t s) {
  if (!detail::FastWidth(k0.width)) return hipErrorInvalidValue;
  KParams k = k0;
  // Launches `launch` over [begin, end) when [range_begin, end) is not empty.
  auto range = [&](int64_t range_begin, int64_t begin, int64_t end,
                   hipError_t (*launch)(const KParams&, hipStream_t)) {
    if (end <= range_begin) return hipSuccess;
    k.tile_begin = begin;
    k.total_tiles = end;
    const hipError_t e = launch(k, s);
    k.after_previous = true;  // the next family may overlap this one's tail
    return e;
  };
  constexpr bool k16 = sizeof(typename T::S) == 2;
  hipError_t e = range(plan.long_tile_begin, k16 ? plan.long_tile_begin : 0, plan.long_tile_end,
                       &LaunchFwdCfLong<T>);
  if (e != hipSuccess) return e;
  e = range(plan.short_tile_begin, plan.short_tile_begin, plan.short_tile_end, &LaunchFwdCfShort<T>);
  if (e != hipSuccess) return e;
  e = range(plan.stream_tile_begin, plan.stream_tile_begin, plan.stream_tile_end,
            &LaunchFwdCfStream<T>);
  if (e != hipSuccess) return e;
  if constexpr (k16) {
    e = range(plan.walk_tile_begin, plan.walk_tile_begin, plan.walk_tile_end, &LaunchFwdCfWalk<T>);
    if (e != hipSuccess) return e;
  }
  return hipGetLastError();
}

template <class T>
hipError_t LaunchCl(const KParams& k, hipStream_t s) {
  if (!detail::FastWidth(k.width)) return hipErrorInvalidValue;
  return LaunchFwdCl<T>(k, s);
}

}  // namespace

namespace detail {

int32_t LaunchFwdChannelFirst(const Conv1dProblem& p, const Conv1dPlanInfo& plan,
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

int32_t LaunchFwdChannelLast(const Conv1dProblem& p, const Conv1dPlanInfo& plan,
                             const Conv1dSegment* segs, void* ws, Stream s) {
  const KParams k = MakeParams(p, plan, segs, ws);
  const auto st = static_cast<hipStream_t>(s);
  switch (p.x_type) {
    case ScalarType::kF32: return LaunchCl<F32>(k, st);
    case ScalarType::kF16: return LaunchCl<F16>(k, st);
    case ScalarType::kBF16: return LaunchCl<BF16>(k, st);
  }
  return hipErrorInvalidValue;
}

}  // namespace detail
}  // namespace conv1d::kernels
