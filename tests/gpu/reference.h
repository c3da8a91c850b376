// Float64 reference of causal depthwise conv1d (forward, backward, decode
// update) for the GPU kernel tests. Written straight from DESIGN §1 with
// plain loops; inputs are the exact values the device sees (already rounded
// to the tensor dtype). Pure functions; safe from any thread.
#ifndef CONV1D_TESTS_GPU_REFERENCE_H_
#define CONV1D_TESTS_GPU_REFERENCE_H_

#include <cstdint>
#include <vector>

namespace conv1d::testing {

struct RefShape {
  int64_t batch = 1;
  int64_t dim = 1;
  int64_t seqlen = 1;
  int64_t width = 4;
  bool channel_last = false;
  bool silu = false;
  bool has_bias = false;
  bool has_init = false;
  bool has_dfinal = false;
  // Index of x[b, d, t] in the activation layout.
  int64_t Idx(int64_t b, int64_t d, int64_t t) const {
    return channel_last ? (b * seqlen + t) * dim + d : (b * dim + d) * seqlen + t;
  }
};

// y and final_states [B,D,W-1].
void RefForward(const RefShape& s, const std::vector<double>& x, const std::vector<double>& w,
                const std::vector<double>& bias, const std::vector<double>& init,
                std::vector<double>* y, std::vector<double>* final_states);

// dx, dweight [D,W], dbias [D], dinitial_states [B,D,W-1].
void RefBackward(const RefShape& s, const std::vector<double>& x, const std::vector<double>& w,
                 const std::vector<double>& bias, const std::vector<double>& init,
                 const std::vector<double>& dout, const std::vector<double>& dfinal,
                 std::vector<double>* dx, std::vector<double>* dw, std::vector<double>* db,
                 std::vector<double>* dinit);

// Decode update: x shaped as s (seqlen = S new tokens), state [B,D,K].
void RefUpdate(const RefShape& s, int64_t state_len, const std::vector<double>& x,
               const std::vector<double>& state, const std::vector<double>& w,
               const std::vector<double>& bias, std::vector<double>* y,
               std::vector<double>* new_state);

// One forward output element, for spot checks of huge tensors.
double RefForwardAt(const RefShape& s, const std::vector<double>& w, const std::vector<double>& bias,
                    double (*x_at)(const void* ctx, int64_t b, int64_t d, int64_t t),
                    const void* ctx, int64_t b, int64_t d, int64_t t);

}  // namespace conv1d::testing

#endif  // CONV1D_TESTS_GPU_REFERENCE_H_
