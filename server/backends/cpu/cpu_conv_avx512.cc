// The CPU conv1d compiled for AVX-512 (F/BW/DQ/VL, with FMA and F16C;
// x86-64 only) preferring 512-bit vectors, through a target pragma rather
// than -m flags so that nothing outside this file's own namespace, such as
// inline functions of shared headers, is built for AVX-512.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "server/backends/cpu/cpu_conv_internal.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define CONV1D_CPU_INTRINSICS 1
// GCC 12 flags the deliberately undefined vectors inside its own AVX-512
// intrinsic headers (clang has no such warning).
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace conv1d::cpu_internal {

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c,bmi,bmi2"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c,bmi,bmi2,prefer-vector-width=512")
#endif
namespace avx512 {

inline constexpr int kIsaLevel = 2;
#include "server/backends/cpu/cpu_conv_isa.inc"

}  // namespace avx512
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

const IsaKernels* Avx512Kernels() { return &avx512::kKernels; }

}  // namespace conv1d::cpu_internal

#else

namespace conv1d::cpu_internal {
const IsaKernels* Avx512Kernels() { return nullptr; }
}  // namespace conv1d::cpu_internal

#endif
