// The CPU conv1d compiled for the build's baseline target (x86-64 without
// extensions, or whatever a non-x86 host's default is): always available.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "server/backends/cpu/cpu_conv_internal.h"

namespace conv1d::cpu_internal {
namespace baseline {

inline constexpr int kIsaLevel = 0;
#include "server/backends/cpu/cpu_conv_isa.inc"

}  // namespace baseline

const IsaKernels* BaselineKernels() { return &baseline::kKernels; }

}  // namespace conv1d::cpu_internal
