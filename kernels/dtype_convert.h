// Device-side element types of the conv1d kernels: fp32, fp16 and bf16 as
// storage formats with explicit conversions to and from fp32 (all arithmetic
// is fp32), plus 16-byte vector loads/stores of them.
//
// Used by the kernel sources in kernels/ only. bf16 is plain 16-bit storage
// (fp32 = bits << 16; round to nearest even back, NaN kept quiet), so neither
// cuda_bf16.h nor hip_bf16.h is needed. Pure device functions; no state.
#ifndef CONV1D_KERNELS_DTYPE_CONVERT_H_
#define CONV1D_KERNELS_DTYPE_CONVERT_H_

#include <cstdint>

#include "kernels/gpu_compat.h"

namespace conv1d::kernels::dev {

__device__ __forceinline__ float bf16_to_float(uint16_t b) {
  return __uint_as_float(static_cast<uint32_t>(b) << 16);
}

__device__ __forceinline__ uint16_t float_to_bf16(float f) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  // One instruction on sm_80+ (round to nearest even, NaN stays NaN).
  uint16_t r;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(f));
  return r;
#else
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
#endif
}

__device__ __forceinline__ float f16_to_float(uint16_t h) {
  return __half2float(__ushort_as_half(h));
}

__device__ __forceinline__ uint16_t float_to_f16(float f) {
  return __half_as_ushort(__float2half_rn(f));
}

// Element type tags: storage type, conversions, elements per 16 bytes;
// kId is the ScalarType value.
struct F32 {
  using S = float;
  static constexpr int kId = 0;
  __device__ __forceinline__ static float to_f(S v) { return v; }
  __device__ __forceinline__ static S from_f(float f) { return f; }
};
struct F16 {
  using S = uint16_t;
  static constexpr int kId = 1;
  __device__ __forceinline__ static float to_f(S v) { return f16_to_float(v); }
  __device__ __forceinline__ static S from_f(float f) { return float_to_f16(f); }
};
struct BF16 {
  using S = uint16_t;
  static constexpr int kId = 2;
  __device__ __forceinline__ static float to_f(S v) { return bf16_to_float(v); }
  __device__ __forceinline__ static S from_f(float f) { return float_to_bf16(f); }
};

template <class T>
inline constexpr int kVecElts = 16 / static_cast<int>(sizeof(typename T::S));

// Raw (unconverted) loads/stores of N elements: one access when they fill 16
// or 8 bytes (the caller guarantees alignment), element-wise otherwise.
template <class T, int N>
__device__ __forceinline__ void load_raw(const typename T::S* p, typename T::S (&out)[N]) {
  using S = typename T::S;
  if constexpr (N * sizeof(S) == 16) {
    const uint4 u = *reinterpret_cast<const uint4*>(p);
    __builtin_memcpy(out, &u, 16);
  } else if constexpr (N * sizeof(S) == 8) {
    const uint2 u = *reinterpret_cast<const uint2*>(p);
    __builtin_memcpy(out, &u, 8);
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) out[i] = p[i];
  }
}

template <class T, int N>
__device__ __forceinline__ void store_raw(typename T::S* p, const typename T::S (&in)[N]) {
  using S = typename T::S;
  if constexpr (N * sizeof(S) == 16) {
    uint4 u;
    __builtin_memcpy(&u, in, 16);
    *reinterpret_cast<uint4*>(p) = u;
  } else if constexpr (N * sizeof(S) == 8) {
    uint2 u;
    __builtin_memcpy(&u, in, 8);
    *reinterpret_cast<uint2*>(p) = u;
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) p[i] = in[i];
  }
}

// Storage to fp32 for N elements. bf16 pairs are converted per 32-bit word
// (low half: shift, high half: mask; one instruction each) instead of
// extracting each half first.
template <class T, int N>
__device__ __forceinline__ void unpack_f(const typename T::S (&s)[N], float (&out)[N]) {
  if constexpr (T::kId == 2 && N % 2 == 0) {
    uint32_t w[N / 2];
    __builtin_memcpy(w, s, sizeof(w));
#pragma unroll
    for (int i = 0; i < N / 2; ++i) {
      out[2 * i] = __uint_as_float(w[i] << 16);
      out[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) out[i] = T::to_f(s[i]);
  }
}

// Converting loads/stores of N elements (vector accesses as load_raw).
template <class T, int N>
__device__ __forceinline__ void load_f(const typename T::S* p, float (&out)[N]) {
  typename T::S s[N];
  load_raw<T, N>(p, s);
  unpack_f<T, N>(s, out);
}

template <class T, int N>
__device__ __forceinline__ void store_f(typename T::S* p, const float (&in)[N]) {
  typename T::S s[N];
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (T::kId != 0 && N % 2 == 0) {
    // Two conversions per instruction (cvt.rn.{bf16,f16}x2.f32).
    uint32_t w[N / 2];
#pragma unroll
    for (int i = 0; i < N / 2; ++i) {
      if constexpr (T::kId == 2) {
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w[i]) : "f"(in[2 * i + 1]), "f"(in[2 * i]));
      } else {
        asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(w[i]) : "f"(in[2 * i + 1]), "f"(in[2 * i]));
      }
    }
    __builtin_memcpy(s, w, sizeof(s));
  } else
#endif
  {
#pragma unroll
    for (int i = 0; i < N; ++i) s[i] = T::from_f(in[i]);
  }
  store_raw<T, N>(p, s);
}

// 16-bit vectors of 8 elements as one uint4 (four 32-bit words, the
// lower-addressed element in the low half): unpacking to and packing from
// fp32.
template <class T>
__device__ __forceinline__ void unpack_words(const uint4& u, float (&out)[8]) {
  static_assert(sizeof(typename T::S) == 2, "16-bit types only");
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (T::kId == 2) {
      out[2 * i] = __uint_as_float(w[i] << 16);
      out[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    } else {
      out[2 * i] = T::to_f(static_cast<uint16_t>(w[i] & 0xffffu));
      out[2 * i + 1] = T::to_f(static_cast<uint16_t>(w[i] >> 16));
    }
  }
}

// fp32 vectors of 4 elements as one uint4.
template <class T>
__device__ __forceinline__ void unpack_words(const uint4& u, float (&out)[4]) {
  static_assert(sizeof(typename T::S) == 4, "fp32 only");
  out[0] = __uint_as_float(u.x);
  out[1] = __uint_as_float(u.y);
  out[2] = __uint_as_float(u.z);
  out[3] = __uint_as_float(u.w);
}

// One 16-byte store of a uint4 (p 16-byte aligned). nvcc split a plain
// uint4 store into four 32-bit ones inside the backward stream loop, so
// CUDA gets the vector store spelled out.
__device__ __forceinline__ void store_words(void* p, const uint4& u) {
#if defined(__CUDA_ARCH__)
  asm volatile("st.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(u.x), "r"(u.y), "r"(u.z), "r"(u.w));
#else
  *static_cast<uint4*>(p) = u;
#endif
}

// Two floats to one word of 16-bit elements (lo in the low half).
template <class T>
__device__ __forceinline__ uint32_t pack_word(float lo, float hi) {
  static_assert(sizeof(typename T::S) == 2, "16-bit types only");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  uint32_t w;
  if constexpr (T::kId == 2) {
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
  } else {
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
  }
  return w;
#else
  return static_cast<uint32_t>(T::from_f(lo)) | (static_cast<uint32_t>(T::from_f(hi)) << 16);
#endif
}

template <class T>
__device__ __forceinline__ uint4 pack_words(const float (&in)[8]) {
  return make_uint4(pack_word<T>(in[0], in[1]), pack_word<T>(in[2], in[3]),
                    pack_word<T>(in[4], in[5]), pack_word<T>(in[6], in[7]));
}

template <class T>
__device__ __forceinline__ uint4 pack_words(const float (&in)[4]) {
  static_assert(sizeof(typename T::S) == 4, "fp32 only");
  return make_uint4(__float_as_uint(in[0]), __float_as_uint(in[1]), __float_as_uint(in[2]),
                    __float_as_uint(in[3]));
}

// Runtime-typed scalar access for small tensors (weights, bias, states,
// dweight): the dtype is uniform across a launch, so the switch costs a
// predictable branch. load_bits and bits_to_float are load_any's two
// halves (the load, raw bits; the conversion), so that a tile can issue its
// small loads first and convert them after its other loads are in flight:
// a conversion right after its load stalls the lane there for the load's
// whole latency.
__device__ __forceinline__ uint32_t load_bits(const void* p, int64_t i, int type) {
  if (type == 0) return __float_as_uint(static_cast<const float*>(p)[i]);
  return static_cast<const uint16_t*>(p)[i];
}
__device__ __forceinline__ float bits_to_float(uint32_t v, int type) {
  if (type == 0) return __uint_as_float(v);
  const uint16_t h = static_cast<uint16_t>(v);
  return type == 1 ? f16_to_float(h) : bf16_to_float(h);
}
__device__ __forceinline__ float load_any(const void* p, int64_t i, int type) {
  return bits_to_float(load_bits(p, i, type), type);
}

__device__ __forceinline__ void store_any(void* p, int64_t i, int type, float f) {
  if (type == 0) {
    static_cast<float*>(p)[i] = f;
  } else {
    static_cast<uint16_t*>(p)[i] = type == 1 ? float_to_f16(f) : float_to_bf16(f);
  }
}

// e^x with denormal results flushed to zero: one multiply and one ex2 on
// NVIDIA (__expf adds a range fix-up of three instructions for results
// below 2^-126, which only ever feed 1 + e^x here).
__device__ __forceinline__ float exp_ftz(float x) {
#if defined(__CUDA_ARCH__)
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x * 1.4426950408889634f));
  return r;
#else
  return __expf(x);
#endif
}

// Fast exp and approximate division (a few ulp): well inside the fp32
// tolerance; IEEE division or reciprocal here made the kernels issue-bound
// (about 40 instructions per element instead of about 12).
// silu(z) = z / (1 + e^-z); exp_ftz differs from __expf only where e^-z is
// below 2^-126, which 1 + e^-z rounds away, so y is unchanged.
__device__ __forceinline__ float silu_f(float z) { return __fdividef(z, 1.0f + exp_ftz(-z)); }

// d silu(z) / dz = s (1 + z (1 - s)), s = sigmoid(z).
__device__ __forceinline__ float silu_grad_f(float z) {
  const float s = __fdividef(1.0f, 1.0f + __expf(-z));
  return s * (1.0f + z * (1.0f - s));
}

// dout * d silu(z) / dz, as (dout s) (1 + (z - z s)): seven instructions
// with the exp and reciprocal (the backward's per-element SiLU cost).
__device__ __forceinline__ float silu_backward_f(float dout, float z) {
  const float s = __fdividef(1.0f, 1.0f + exp_ftz(-z));
  const float ds = dout * s;
  const float t = fmaf(-z, s, z);
  return fmaf(ds, t, ds);
}

}  // namespace conv1d::kernels::dev

#endif  // CONV1D_KERNELS_DTYPE_CONVERT_H_
