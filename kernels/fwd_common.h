// The forward kernel families' shared pieces and launchers
// (kernels/fwd_*.hip). A family launcher launches its kernel over the tiles
// [k.tile_begin, k.total_tiles) of the planned table on stream s and
// returns the launch error; fwd_launch.hip picks the families of a launch.
//
// Used by kernels/fwd_*.hip only. Device functions and declarations; no
// state.
#ifndef CONV1D_KERNELS_FWD_COMMON_H_
#define CONV1D_KERNELS_FWD_COMMON_H_

#include "kernels/conv1d_device.h"

namespace conv1d::kernels::dev {

// The row's final state (the last W-1 columns of x̃) into final_states,
// by one lane; shared by the long-row and stream kernels.
template <class T, int W>
__device__ __forceinline__ void write_final_cf(const KParams& p, const Conv1dSegment& seg,
                                               const typename T::S* xrow, int64_t row) {
  using S = typename T::S;
  const int64_t L = seg.seqlen;
  S* fin = static_cast<S*>(seg.out(Role::kFinalStates)) + row * (W - 1);
  const S* init = static_cast<const S*>(seg.in(Role::kInitialStates));
#pragma unroll
  for (int i = 0; i < W - 1; ++i) {
    const int64_t q = L - (W - 1) + i;
    S v;
    if (q >= 0) v = xrow[q];
    else if (p.has_init) v = init[row * (W - 1) + (W - 1) + q];
    else v = T::from_f(0.0f);
    fin[i] = v;
  }
}

template <class T>
hipError_t LaunchFwdCfLong(const KParams& k, hipStream_t s);    // fwd_cf_long.hip
template <class T>
hipError_t LaunchFwdCfShort(const KParams& k, hipStream_t s);   // fwd_cf_short.hip
template <class T>
hipError_t LaunchFwdCfStream(const KParams& k, hipStream_t s);  // fwd_cf_stream.hip
template <class T>
hipError_t LaunchFwdCfWalk(const KParams& k, hipStream_t s);    // fwd_cf_walk.hip (16-bit)
template <class T>
hipError_t LaunchFwdCl(const KParams& k, hipStream_t s);        // fwd_cl.hip
template <class T>
int FwdClBlocksPerSm(int width);  // fwd_cl.hip: 0 when unknown

}  // namespace conv1d::kernels::dev

#endif  // CONV1D_KERNELS_FWD_COMMON_H_
