// The CPU conv1d compiled for AVX2 + FMA + F16C (x86-64 only), through a
// target pragma rather than -m flags so that nothing outside this file's own
// namespace, such as inline functions of shared headers, is built for AVX2.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "server/backends/cpu/cpu_conv_internal.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define CONV1D_CPU_INTRINSICS 1

namespace conv1d::cpu_internal {

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,bmi,bmi2"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,bmi,bmi2")
#endif
namespace avx2 {

inline constexpr int kIsaLevel = 1;
#include "server/backends/cpu/cpu_conv_isa.inc"

}  // namespace avx2
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

const IsaKernels* Avx2Kernels() { return &avx2::kKernels; }

}  // namespace conv1d::cpu_internal

#else

namespace conv1d::cpu_internal {
const IsaKernels* Avx2Kernels() { return nullptr; }
}  // namespace conv1d::cpu_internal

#endif
