// The backward's dweight/dbias reduction as its own launch
// (reduce_dw_kernel, a dependent of the main kernel): the body is
// reduce_dw_teams (reduce_dw.h).
#include "kernels/reduce_dw.h"

namespace conv1d::kernels::dev {
namespace {

using detail::kTeamsPerBlock;

template <bool kLanes>
__global__ void __launch_bounds__(kTeam * kTeamsPerBlock) reduce_dw_kernel(KParams p) {
  // Launched as a dependent of the main kernel: the partials are complete
  // from here on.
  gpu_wait_prerequisites();
  reduce::reduce_dw_teams<kLanes>(p, static_cast<int64_t>(blockIdx.x) * kTeamsPerBlock + threadIdx.x / kTeam,
                                  static_cast<int64_t>(gridDim.x) * kTeamsPerBlock);
}

}  // namespace

hipError_t LaunchReduceDw(const KParams& k, int64_t max_partials, hipStream_t s) {
  const hipError_t e = hipGetLastError();
  if (e != hipSuccess) return e;
  const int64_t pairs = static_cast<int64_t>(k.nseg) * k.dim;
  if (ReduceDwLanes(k, max_partials)) {
    const int64_t teams = (pairs + kTeam - 1) / kTeam;
    return LaunchKernel(true, reduce_dw_kernel<true>,
                        GridFor((teams + kTeamsPerBlock - 1) / kTeamsPerBlock), kTeam * kTeamsPerBlock,
                        s, k);
  }
  return LaunchKernel(true, reduce_dw_kernel<false>,
                      GridFor((pairs + kTeamsPerBlock - 1) / kTeamsPerBlock), kTeam * kTeamsPerBlock, s,
                      k);
}

}  // namespace conv1d::kernels::dev
