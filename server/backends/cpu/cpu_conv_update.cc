// Decode step of the CPU conv1d. Per channel, x̂ = concat(conv_state, x) of
// length K + S (non-circular); y[s] uses the W-1 entries of x̂ before x[s],
// and the new state is the last K entries of x̂ (copied as bytes, so a state
// round-trips exactly). Works row by row: decode batches are small and the
// per-row cost is dominated by the state, which is contiguous in both
// layouts.
#include <cstring>
#include <vector>

#include "server/backends/cpu/cpu_conv_internal.h"

namespace conv1d::cpu_internal {
namespace {

template <DType T>
struct UpdateRows {
  template <int kW>
  static void RunWidth(const ConvParams& p, bool channel_last, ThreadPool* pool) {
    const int64_t state_len = p.state_len;
    const int64_t steps = p.seqlen;
    const int64_t elem_bytes = DTypeSize(T);
    const int64_t min_block = std::max<int64_t>(1, 4096 / (state_len + steps));
    ParallelFor(pool, p.batch * p.dim, min_block, [&](int64_t begin, int64_t end) {
      thread_local std::vector<float> xs;
      thread_local std::vector<float> out;
      xs.resize(state_len + steps);
      out.resize(steps);
      const char* state = static_cast<const char*>(p.conv_state);
      const char* x = static_cast<const char*>(p.x);
      char* state_out = static_cast<char*>(p.conv_state_out);
      for (int64_t row = begin; row < end; ++row) {
        const int64_t b = row / p.dim;
        const int64_t d = row % p.dim;
        // Element index of x[b, d, s] is x_base + s * x_step.
        const int64_t x_base = channel_last ? b * steps * p.dim + d : row * steps;
        const int64_t x_step = channel_last ? p.dim : 1;
        LoadRow<T>(p.conv_state, row * state_len, state_len, xs.data());
        if (channel_last) {
          for (int64_t s = 0; s < steps; ++s) {
            xs[state_len + s] = LoadAsFloat(p.x, T, x_base + s * x_step);
          }
        } else {
          LoadRow<T>(p.x, x_base, steps, xs.data() + state_len);
        }
        ConvolveRow<kW>(xs.data() + state_len - p.halo, p.w + d * p.width, p.width,
                        p.bias[d], steps, out.data());
        if (p.silu) SiluInPlace(out.data(), steps);
        if (channel_last) {
          for (int64_t s = 0; s < steps; ++s) {
            StoreFromFloat(p.y, T, x_base + s * x_step, out[s]);
          }
        } else {
          StoreRow<T>(p.y, x_base, steps, out.data());
        }
        // New state[i] = x̂[S + i]. Increasing i reads ahead of where it
        // writes, so conv_state_out may alias conv_state.
        char* dst = state_out + row * state_len * elem_bytes;
        for (int64_t i = 0; i < state_len; ++i) {
          const int64_t j = steps + i;
          const char* src = j < state_len
                                ? state + (row * state_len + j) * elem_bytes
                                : x + (x_base + (j - state_len) * x_step) * elem_bytes;
          std::memmove(dst + i * elem_bytes, src, elem_bytes);
        }
      }
    });
  }

  static void Run(const ConvParams& p, bool channel_last, ThreadPool* pool) {
    switch (p.width) {
      case 1: RunWidth<1>(p, channel_last, pool); break;
      case 2: RunWidth<2>(p, channel_last, pool); break;
      case 3: RunWidth<3>(p, channel_last, pool); break;
      case 4: RunWidth<4>(p, channel_last, pool); break;
      default: RunWidth<0>(p, channel_last, pool); break;
    }
  }
};

}  // namespace

void Update(const ConvParams& p, bool channel_last, ThreadPool* pool) {
  DispatchDType<UpdateRows>(p.x_dtype, p, channel_last, pool);
}

}  // namespace conv1d::cpu_internal
