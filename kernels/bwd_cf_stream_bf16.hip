// The channel-first stream backward (kernels/bwd_cf_stream.h) for bf16
// inputs.
#include "kernels/bwd_cf_stream.h"

namespace conv1d::kernels::dev {

template <>
hipError_t LaunchBwdCfStream<BF16>(const KParams& k, hipStream_t s) {
  return LaunchBwdCfStreamOf<BF16>(k, s);
}

}  // namespace conv1d::kernels::dev
