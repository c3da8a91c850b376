// A plain float64 reference of causal depthwise conv1d (DESIGN §1: forward,
// backward, decode update), written straight from the formulas with no code
// shared with the CPU backend or the GPU kernels. The CPU backend tests
// (tests/cpu) and the GPU kernel tests (tests/gpu) both compare against it;
// inputs are the exact values the implementation sees (already rounded to the
// tensor dtype).
//
// Besides values it returns, per output element, the sum of absolute values
// of the terms that produced it ("scale"), from which the tests derive error
// bounds for fp32 accumulation. Pure functions: thread-safe.
#ifndef CONV1D_TESTS_COMMON_REFERENCE_H_
#define CONV1D_TESTS_COMMON_REFERENCE_H_

#include <cstdint>
#include <vector>

namespace conv1d::ref {

// Activations are [B,D,L] (or [B,L,D] when channel_last); weight [D,W]; bias
// [D]; states [B,D,W-1]; conv_state [B,D,state_len]. Empty vectors are absent
// tensors (zeros for states, no bias).
struct Inputs {
  int64_t batch = 0, seqlen = 0, dim = 0, width = 0, state_len = 0;
  bool channel_last = false;
  bool silu = false;
  std::vector<double> x, dout, weight, bias, initial_states, dfinal_states,
      conv_state;
};

struct Outputs {
  std::vector<double> y, final_states, dx, dweight, dbias, dinitial_states,
      conv_state_out;
  // Σ|term| bounds, same shapes as the outputs above. For backward with SiLU
  // the g terms are bounded by |dout|·(1 + |z| scale) to cover the error of
  // recomputing z in fp32.
  std::vector<double> y_scale, dx_scale, dweight_scale, dbias_scale,
      dinitial_states_scale;
};

Outputs Forward(const Inputs& in);
Outputs Backward(const Inputs& in);
Outputs Update(const Inputs& in);

// Σ dout·y + Σ dfinal_states·final_states of the forward pass: the loss whose
// gradients Backward returns (for finite-difference checks).
double Loss(const Inputs& in);

// One forward output element y[b, d, t], for spot checks of tensors too large
// to copy into `Inputs::x`: x is read through `x_at`; the shape, weight, bias,
// initial states and activation come from `in` (its x is not used).
using XAt = double (*)(const void* ctx, int64_t b, int64_t d, int64_t t);
double ForwardAt(const Inputs& in, XAt x_at, const void* ctx, int64_t b, int64_t d, int64_t t);

}  // namespace conv1d::ref

#endif  // CONV1D_TESTS_COMMON_REFERENCE_H_
