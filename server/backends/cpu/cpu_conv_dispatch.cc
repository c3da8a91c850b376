// Run-time choice between the per-ISA copies of the CPU conv1d: the best one
// this CPU supports (cpuid, once), optionally lowered by CONV1D_CPU_ISA.
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "server/backends/cpu/cpu_conv_internal.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#endif

namespace conv1d::cpu_internal {

const IsaKernels* BaselineKernels();
const IsaKernels* Avx2Kernels();
const IsaKernels* Avx512Kernels();

namespace {

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// F16C from cpuid leaf 1 (ECX bit 29): clang before 15 has no
// __builtin_cpu_supports("f16c"). The AVX2 check beside it already covers
// the OS saving the AVX registers.
bool CpuHasF16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (ecx & bit_F16C) != 0;
}
#endif

bool CpuHas(Isa isa) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  switch (isa) {
    case Isa::kBaseline: return true;
    case Isa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             CpuHasF16c() && __builtin_cpu_supports("bmi") &&
             __builtin_cpu_supports("bmi2");
    case Isa::kAvx512:
      return CpuHas(Isa::kAvx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512vl");
  }
  return false;
#else
  return isa == Isa::kBaseline;
#endif
}

Isa ComputeDefaultIsa() {
  Isa best = Isa::kBaseline;
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    if (KernelsFor(isa) != nullptr) best = isa;
  }
  const char* env = std::getenv("CONV1D_CPU_ISA");
  if (env != nullptr) {
    for (int i = 0; i < kNumIsas; ++i) {
      const Isa isa = static_cast<Isa>(i);
      // Only ever lowers the choice: asking for more than the CPU has is ignored.
      if (std::strcmp(env, IsaName(isa)) == 0 && i <= static_cast<int>(best)) return isa;
    }
  }
  return best;
}

std::atomic<const IsaKernels*> g_active{nullptr};
std::atomic<int> g_active_isa{-1};

}  // namespace

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kBaseline: return "baseline";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
  }
  return "?";
}

const IsaKernels* KernelsFor(Isa isa) {
  if (!CpuHas(isa)) return nullptr;
  switch (isa) {
    case Isa::kBaseline: return BaselineKernels();
    case Isa::kAvx2: return Avx2Kernels();
    case Isa::kAvx512: return Avx512Kernels();
  }
  return nullptr;
}

Isa DefaultIsa() {
  static const Isa isa = ComputeDefaultIsa();
  return isa;
}

bool SetActiveIsa(Isa isa) {
  const IsaKernels* k = KernelsFor(isa);
  if (k == nullptr) return false;
  g_active_isa.store(static_cast<int>(isa), std::memory_order_relaxed);
  g_active.store(k, std::memory_order_release);
  return true;
}

const IsaKernels& ActiveKernels() {
  const IsaKernels* k = g_active.load(std::memory_order_acquire);
  if (k == nullptr) {
    // Racing first calls all store the same table.
    SetActiveIsa(DefaultIsa());
    k = g_active.load(std::memory_order_acquire);
  }
  return *k;
}

Isa ActiveIsa() {
  ActiveKernels();
  return static_cast<Isa>(g_active_isa.load(std::memory_order_relaxed));
}

void ForwardChannelFirst(const ConvParams& p, ThreadPool* pool) {
  ActiveKernels().forward_channel_first(p, pool);
}
void ForwardChannelLast(const ConvParams& p, ThreadPool* pool) {
  ActiveKernels().forward_channel_last(p, pool);
}
void BackwardChannelFirst(const ConvParams& p, ThreadPool* pool) {
  ActiveKernels().backward_channel_first(p, pool);
}
void BackwardChannelLast(const ConvParams& p, ThreadPool* pool) {
  ActiveKernels().backward_channel_last(p, pool);
}
void Update(const ConvParams& p, bool channel_last, ThreadPool* pool) {
  ActiveKernels().update(p, channel_last, pool);
}

}  // namespace conv1d::cpu_internal
