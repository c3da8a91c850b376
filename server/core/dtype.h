// Element types of tensors and the scalar conversions between them.
//
// Used by every layer above the wire (core, backends, client verification).
// fp16 and bf16 are 16-bit storage formats converted to and from fp32
// explicitly; all arithmetic happens in fp32 or wider. Pure functions: safe
// from any thread.
#ifndef CONV1D_SERVER_CORE_DTYPE_H_
#define CONV1D_SERVER_CORE_DTYPE_H_

#include <cstdint>
#include <cstring>
#include <string_view>

namespace conv1d {

enum class DType : uint8_t { kF32 = 0, kF16 = 1, kBF16 = 2 };

inline constexpr int kNumDTypes = 3;

constexpr int64_t DTypeSize(DType t) { return t == DType::kF32 ? 4 : 2; }

constexpr const char* DTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "fp32";
    case DType::kF16: return "fp16";
    case DType::kBF16: return "bf16";
  }
  return "?";
}

inline float BF16ToFloat(uint16_t bits) {
  uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Round to nearest even; NaN stays NaN (quiet).
inline uint16_t FloatToBF16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      u = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Round to nearest even, overflow to infinity, NaN stays NaN.
inline uint16_t FloatToHalf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds past 65504
  if (abs < 0x38800000u) {                        // subnormal or zero in fp16
    if (abs < 0x33000000u) return sign;           // below half the smallest subnormal
    const uint32_t shift = 126 - (abs >> 23);     // 14..24
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half & 1u))) ++half;
    return sign | static_cast<uint16_t>(half);
  }
  uint32_t r = abs - 0x38000000u;  // rebias exponent 127 -> 15
  r += 0xfffu + ((r >> 13) & 1u);
  return sign | static_cast<uint16_t>(r >> 13);
}

// Loads element i of a buffer of type t as fp32.
inline float LoadAsFloat(const void* base, DType t, int64_t i) {
  switch (t) {
    case DType::kF32: return static_cast<const float*>(base)[i];
    case DType::kF16: return HalfToFloat(static_cast<const uint16_t*>(base)[i]);
    case DType::kBF16: return BF16ToFloat(static_cast<const uint16_t*>(base)[i]);
  }
  return 0.f;
}

// Stores fp32 v as element i of a buffer of type t (rounding to nearest even).
inline void StoreFromFloat(void* base, DType t, int64_t i, float v) {
  switch (t) {
    case DType::kF32: static_cast<float*>(base)[i] = v; break;
    case DType::kF16: static_cast<uint16_t*>(base)[i] = FloatToHalf(v); break;
    case DType::kBF16: static_cast<uint16_t*>(base)[i] = FloatToBF16(v); break;
  }
}

}  // namespace conv1d

#endif  // CONV1D_SERVER_CORE_DTYPE_H_
