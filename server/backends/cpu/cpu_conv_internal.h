// Internals of the CPU conv1d implementation, shared by its per-op files
// (cpu_conv_{forward,backward,update}.inc, compiled once per instruction set
// by cpu_conv_{baseline,avx2,avx512}.cc): the flat parameter block, the
// per-ISA kernel table and its run-time choice, and branchless scalar dtype
// conversions. Not part of the public API; only cpu_conv.cc, the benchmark
// and the tests include it. Thread-safe: pure functions, plain values, and
// an atomic choice of kernels.
#ifndef CONV1D_SERVER_BACKENDS_CPU_CPU_CONV_INTERNAL_H_
#define CONV1D_SERVER_BACKENDS_CPU_CPU_CONV_INTERNAL_H_

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "server/util/thread_pool.h"
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

// The whole implementation, compiled once per instruction set
// (cpu_conv_{baseline,avx2,avx512}.cc) and chosen at run time.
enum class Isa : uint8_t { kBaseline = 0, kAvx2 = 1, kAvx512 = 2 };
inline constexpr int kNumIsas = 3;

const char* IsaName(Isa isa);

struct IsaKernels {
  void (*forward_channel_first)(const ConvParams& p, ThreadPool* pool);
  void (*forward_channel_last)(const ConvParams& p, ThreadPool* pool);
  void (*backward_channel_first)(const ConvParams& p, ThreadPool* pool);
  void (*backward_channel_last)(const ConvParams& p, ThreadPool* pool);
  void (*update)(const ConvParams& p, bool channel_last, ThreadPool* pool);
  // Row conversions as the passes above use them (exposed for checks).
  void (*load_row)(DType t, const void* base, int64_t offset, int64_t n, float* dst);
  void (*store_row)(DType t, void* base, int64_t offset, int64_t n, const float* src);
};

// Null when `isa` was not compiled in (non-x86 hosts) or this CPU lacks it.
const IsaKernels* KernelsFor(Isa isa);

// The best ISA this CPU runs, unless CONV1D_CPU_ISA=baseline|avx2|avx512
// asks for a lower one. Decided on first use.
Isa DefaultIsa();

// Kernels used by the entry points below: DefaultIsa() unless SetActiveIsa
// chose another. Thread-safe (an atomic pointer).
const IsaKernels& ActiveKernels();
Isa ActiveIsa();
// For benchmarks and tests: false (and no change) when `isa` is unavailable.
bool SetActiveIsa(Isa isa);

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

}  // namespace conv1d::cpu_internal

#endif  // CONV1D_SERVER_BACKENDS_CPU_CPU_CONV_INTERNAL_H_
