// The channel-first stream backward (kernels/bwd_cf_stream.h) for f16
// inputs.
#include "kernels/bwd_cf_stream.h"

namespace conv1d::kernels::dev {

template <>
hipError_t LaunchBwdCfStream<F16>(const KParams& k, hipStream_t s) {
  return LaunchBwdCfStreamOf<F16>(k, s);
}

}  // namespace conv1d::kernels::dev
