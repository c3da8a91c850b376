// Internals of the CPU conv1d implementation, shared by its per-op files
// (cpu_conv_forward.cc, cpu_conv_backward.cc, cpu_conv_update.cc): the flat
// parameter block, vectorisable dtype conversions of whole rows, and a
// vectorisable exp for SiLU. Not part of the public API; only cpu_conv.cc
// and the tests include it. Pure functions and plain values: thread-safe.
#ifndef CONV1D_SERVER_BACKENDS_CPU_CPU_CONV_INTERNAL_H_
#define CONV1D_SERVER_BACKENDS_CPU_CPU_CONV_INTERNAL_H_

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "server/backends/cpu/thread_pool.h"
#include "server/core/conv_problem.h"
#include "server/core/dtype.h"

namespace conv1d::cpu_internal {

// Time steps per work item and scratch row on the channel-first path, and
// the time x channel tile of the channel-last path. Constants (not derived
// from the thread count) so that reductions always sum in the same order.
inline constexpr int64_t kRowChunk = 2048;
inline constexpr int64_t kTileSteps = 64;
inline constexpr int64_t kTileChannels = 256;

// One segment, with everything resolved to raw pointers. Absent tensors are
// null. Weights and bias are already fp32: `w` is [D][W] for channel-first
// and [W][D] for channel-last (so the inner loop over D reads it
// contiguously); `bias` is [D] (zeros when the request has none).
struct ConvParams {
  int64_t batch = 0, seqlen = 0, dim = 0, width = 0;
  int64_t halo = 0;       // W - 1
  int64_t state_len = 0;  // update: K
  DType x_dtype = DType::kF32;
  DType grad_weight_dtype = DType::kF32;
  bool silu = false;
  const float* w = nullptr;
  const float* bias = nullptr;
  const void* x = nullptr;
  const void* dout = nullptr;
  const void* initial_states = nullptr;
  const void* dfinal_states = nullptr;
  const void* conv_state = nullptr;
  void* y = nullptr;
  void* final_states = nullptr;
  void* dx = nullptr;
  void* dinitial_states = nullptr;
  void* conv_state_out = nullptr;
  void* dweight = nullptr;
  void* dbias = nullptr;
};

void ForwardChannelFirst(const ConvParams& p, ThreadPool* pool);
void ForwardChannelLast(const ConvParams& p, ThreadPool* pool);
void BackwardChannelFirst(const ConvParams& p, ThreadPool* pool);
void BackwardChannelLast(const ConvParams& p, ThreadPool* pool);
void Update(const ConvParams& p, bool channel_last, ThreadPool* pool);

inline float AsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline uint32_t AsBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// Bit-identical to HalfToFloat in dtype.h, written with selects instead of
// branches so that loops over rows vectorise (and without touching fp32
// subnormals, which are slow on x86).
inline float HalfToFloatBranchless(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t em = h & 0x7fffu;
  const uint32_t normal = (em << 13) + (112u << 23);
  const uint32_t special = 0x7f800000u | ((em & 0x3ffu) << 13);
  const uint32_t subnormal = AsBits(static_cast<float>(static_cast<int32_t>(em)) * 0x1p-24f);
  uint32_t u = em >= 0x7c00u ? special : normal;
  u = em < 0x400u ? subnormal : u;
  return AsFloat(u | sign);
}

// Bit-identical to FloatToHalf in dtype.h (round to nearest even), branchless.
inline uint16_t FloatToHalfBranchless(float f) {
  const uint32_t u = AsBits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs = u & 0x7fffffffu;
  uint32_t r = abs - 0x38000000u;
  r = (r + 0xfffu + ((r >> 13) & 1u)) >> 13;
  // Below the smallest normal half: let the fp32 adder round, with 0.5 fixing
  // the exponent so that one fp32 ulp is one fp16 subnormal step.
  const uint32_t sub = AsBits(AsFloat(abs) + 0.5f) - 0x3f000000u;
  r = abs < 0x38800000u ? sub : r;
  r = abs >= 0x477ff000u ? 0x7c00u : r;
  r = abs > 0x7f800000u ? 0x7e00u : r;
  return static_cast<uint16_t>(r | sign);
}

// Loads n elements starting at element `offset` of a buffer of dtype T.
template <DType T>
inline void LoadRow(const void* base, int64_t offset, int64_t n, float* dst) {
  if constexpr (T == DType::kF32) {
    std::memcpy(dst, static_cast<const float*>(base) + offset, n * sizeof(float));
  } else {
    const uint16_t* src = static_cast<const uint16_t*>(base) + offset;
    for (int64_t i = 0; i < n; ++i) {
      if constexpr (T == DType::kF16) {
        dst[i] = HalfToFloatBranchless(src[i]);
      } else {
        dst[i] = AsFloat(static_cast<uint32_t>(src[i]) << 16);
      }
    }
  }
}

template <DType T>
inline void StoreRow(void* base, int64_t offset, int64_t n, const float* src) {
  if constexpr (T == DType::kF32) {
    std::memcpy(static_cast<float*>(base) + offset, src, n * sizeof(float));
  } else {
    uint16_t* dst = static_cast<uint16_t*>(base) + offset;
    for (int64_t i = 0; i < n; ++i) {
      if constexpr (T == DType::kF16) {
        dst[i] = FloatToHalfBranchless(src[i]);
      } else {
        dst[i] = FloatToBF16(src[i]);
      }
    }
  }
}

// exp(x) within ~2 ulp for the range that matters to a sigmoid, branchless
// so that SiLU loops vectorise (std::exp does not). Inputs are clamped to
// [-86, 88], where the result is still a normal float.
inline float ExpApprox(float x) {
  x = std::min(88.0f, std::max(-86.0f, x));
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693145751953125f;
  constexpr float kLn2Lo = 1.428606765330187e-06f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: rounds to integer
  const float n = (x * kLog2e + kRound) - kRound;
  const float r = (x - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t e = static_cast<int32_t>(n) + 127;
  return p * AsFloat(static_cast<uint32_t>(e) << 23);
}

inline float Sigmoid(float z) { return 1.0f / (1.0f + ExpApprox(-z)); }

// SiLU applied in place to n pre-activations.
inline void SiluInPlace(float* z, int64_t n) {
  for (int64_t i = 0; i < n; ++i) z[i] = z[i] * Sigmoid(z[i]);
}

// dout scaled by SiLU's derivative at z: g = dout * s * (1 + z * (1 - s)).
inline float SiluGrad(float z, float dout) {
  const float s = Sigmoid(z);
  return dout * s * (1.0f + z * (1.0f - s));
}

// out[i] = bias + Σ_k w[k]·in[i+k] for i < n.
template <int kW>
inline void ConvolveRow(const float* in, const float* w, int64_t width, float bias,
                        int64_t n, float* out) {
  if constexpr (kW == 1) {
    for (int64_t i = 0; i < n; ++i) out[i] = bias + w[0] * in[i];
  } else if constexpr (kW == 2) {
    for (int64_t i = 0; i < n; ++i) out[i] = bias + w[0] * in[i] + w[1] * in[i + 1];
  } else if constexpr (kW == 3) {
    for (int64_t i = 0; i < n; ++i)
      out[i] = bias + w[0] * in[i] + w[1] * in[i + 1] + w[2] * in[i + 2];
  } else if constexpr (kW == 4) {
    for (int64_t i = 0; i < n; ++i)
      out[i] = bias + w[0] * in[i] + w[1] * in[i + 1] + w[2] * in[i + 2] +
               w[3] * in[i + 3];
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = bias;
    for (int64_t k = 0; k < width; ++k) {
      const float wk = w[k];
      const float* src = in + k;
      for (int64_t i = 0; i < n; ++i) out[i] += wk * src[i];
    }
  }
}

// Channel-last: out[c] = bias[c] + Σ_k w[k][c]·in[i+k][c], D innermost.
template <int kW>
inline void ConvolveStep(const float* in, int64_t in_stride, const float* w,
                         int64_t w_stride, int64_t width, const float* bias,
                         int64_t dc, float* out) {
  if constexpr (kW >= 1 && kW <= 4) {
    const float* r0 = in;
    const float* r1 = in + in_stride;
    const float* r2 = in + 2 * in_stride;
    const float* r3 = in + 3 * in_stride;
    const float* w0 = w;
    const float* w1 = w + w_stride;
    const float* w2 = w + 2 * w_stride;
    const float* w3 = w + 3 * w_stride;
    for (int64_t c = 0; c < dc; ++c) {
      float acc = bias[c] + w0[c] * r0[c];
      if constexpr (kW >= 2) acc += w1[c] * r1[c];
      if constexpr (kW >= 3) acc += w2[c] * r2[c];
      if constexpr (kW >= 4) acc += w3[c] * r3[c];
      out[c] = acc;
    }
  } else {
    for (int64_t c = 0; c < dc; ++c) out[c] = bias[c];
    for (int64_t k = 0; k < width; ++k) {
      const float* wk = w + k * w_stride;
      const float* rk = in + k * in_stride;
      for (int64_t c = 0; c < dc; ++c) out[c] += wk[c] * rk[c];
    }
  }
}

// Dispatches a functor templated on the activation dtype.
template <template <DType> class Fn, typename... Args>
void DispatchDType(DType t, Args&&... args) {
  switch (t) {
    case DType::kF32: Fn<DType::kF32>::Run(args...); break;
    case DType::kF16: Fn<DType::kF16>::Run(args...); break;
    case DType::kBF16: Fn<DType::kBF16>::Run(args...); break;
  }
}

}  // namespace conv1d::cpu_internal

#endif  // CONV1D_SERVER_BACKENDS_CPU_CPU_CONV_INTERNAL_H_
