// Device-side helpers shared by the conv1d kernel sources: the by-value
// kernel parameter block, the kernel launch (ordinary or dependent),
// segment lookup over the ragged segment table, and fixed-order
// (deterministic) team reductions.
//
// Used by kernels/*.hip only. Device functions, plain structs and a
// reentrant launch helper; no state.
#ifndef CONV1D_KERNELS_CONV1D_DEVICE_H_
#define CONV1D_KERNELS_CONV1D_DEVICE_H_

#include <cstdint>
#include <utility>

#include "kernels/conv1d_internal.h"
#include "kernels/conv1d_params.h"
#include "kernels/dtype_convert.h"
#include "kernels/gpu_compat.h"

namespace conv1d::kernels::dev {

// Everything a kernel needs besides its template arguments, passed by value.
struct KParams {
  const Conv1dSegment* segs;
  int32_t nseg;
  int32_t width;
  int64_t total_tiles;  // end of the launch's tile range
  int64_t tile_begin;   // start of the launch's tile range (0 unless split)
  int64_t dim;
  int32_t wtype;   // ScalarType of weight/bias
  int32_t gwtype;  // ScalarType of dweight/dbias
  int32_t layout;  // KernelLayout
  int32_t uniform_tiles;  // Conv1dPlanInfo::uniform_tiles
  bool silu;
  bool has_bias;
  bool has_init;
  bool ret_final;
  bool has_dfinal;
  bool ret_dinit;
  float* partials;     // workspace: dweight/dbias partials
  float* gbuf;         // workspace: g (general backward path)
  // Launched as a dependent of the previous kernel family's launch (see
  // LaunchKernel): the families of one run write disjoint tiles, so they
  // may overlap.
  bool after_previous;
  // The channel-last backward sums the partials itself after a grid
  // barrier (launched cooperatively, every block resident; LaunchBwdCl):
  // 0 no (reduce_dw_kernel follows), 1 a team per channel, 2 a lane per
  // channel (ReduceDwLanes).
  int32_t fused_reduce;
};

inline KParams MakeParams(const Conv1dProblem& p, const Conv1dPlanInfo& plan,
                          const Conv1dSegment* segs, void* ws) {
  KParams k{};
  k.segs = segs;
  k.nseg = plan.num_segments;
  k.width = p.width;
  k.total_tiles = plan.total_tiles;
  k.tile_begin = 0;
  k.dim = p.dim;
  k.wtype = static_cast<int32_t>(p.weight_type);
  k.gwtype = static_cast<int32_t>(p.grad_weight_type);
  k.layout = static_cast<int32_t>(p.layout);
  k.uniform_tiles = plan.uniform_tiles;
  k.silu = p.activation == KernelActivation::kSiLU;
  k.has_bias = p.has_bias;
  k.has_init = p.has_initial_states;
  k.ret_final = p.return_final_states;
  k.has_dfinal = p.has_dfinal_states;
  k.ret_dinit = p.return_dinitial_states;
  k.partials = static_cast<float*>(ws);
  k.gbuf = k.partials;
  return k;
}

// Launches kernel<<<grid, block, 0, stream>>>(args...); when `dependent`,
// as a dependent of the kernel before it in the stream: on CUDA
// (programmatic stream serialization) its blocks may become resident while
// that kernel's last blocks still run, once they have all called
// gpu_allow_dependents(). A kernel launched so must call
// gpu_wait_prerequisites() before it reads anything the kernel before it
// wrote, and in any case before it exits (gpu_exit_after_prerequisites()
// as its last statement when it reads nothing of it), so that whatever
// follows in the stream finds both finished. HIP: an ordinary launch either way. Returns
// the launch's error.
template <class... KArgs, class... Args>
inline hipError_t LaunchKernel(bool dependent, void (*kernel)(KArgs...), unsigned grid,
                               unsigned block, hipStream_t stream, Args&&... args) {
#if defined(CONV1D_PLATFORM_CUDA)
  if (dependent) {
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(grid);
    config.blockDim = dim3(block);
    config.dynamicSmemBytes = 0;
    config.stream = stream;
    config.attrs = attr;
    config.numAttrs = 1;
    return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
  }
#else
  (void)dependent;
#endif
  kernel<<<grid, block, 0, stream>>>(std::forward<Args>(args)...);
  return hipGetLastError();
}

// See WidthSwitch (conv1d_internal.h).
template <class F>
__host__ __device__ __forceinline__ void BoolSwitch(bool b, F&& f) {
  if (b) f(detail::Bool<true>{});
  else f(detail::Bool<false>{});
}

// Blocks of `kernel` at `threads` per block (no dynamic shared memory) that
// one multiprocessor holds at once, from the runtime's occupancy query; 0
// when the runtime cannot say (the caller clears the error).
template <class Kernel>
int BlocksPerSm(Kernel kernel, int threads) {
  int n = 0;
  return hipOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, 0) == hipSuccess ? n : 0;
}

inline unsigned GridFor(int64_t blocks) {
  if (blocks < 1) blocks = 1;
  return static_cast<unsigned>(blocks < detail::kMaxGridBlocks ? blocks : detail::kMaxGridBlocks);
}

// A segment's table entry spans two cache lines: the pointers and seqlen
// in the first, the planner's fields (vec, rows_per_tile, nchunks,
// per_lane, ws_partial_offset) in the second. The stream kernels' tile
// check reads the second line and the team then starts from the first.
// Reading x (every segment has one) within the check requests the first
// line beside the check's own loads instead of after the check (the
// check's `vec` test still comes first).
__device__ __forceinline__ bool seg_lines_together(const Conv1dSegment& seg) {
  return seg.in(Role::kX) != nullptr;
}

// Which kernel family a channel-first tile belongs to: short-row vector
// segments (rows_per_tile > 1) go to the short-row kernels and long-row
// vector segments to the stream kernels (is_stream_tile; the walked 16-bit
// ones, ws_partial_offset == kWsWalked, to bwd_cf_walk_kernel and
// fwd_cf_walk_kernel); the long-row kernels take the scalar rest. Each
// kernel skips the others' tiles, so each gets its own register
// allocation.
__device__ __forceinline__ bool is_short_tile(const Conv1dSegment& seg) {
  return seg.vec && seg.rows_per_tile > 1;
}

__device__ __forceinline__ bool is_stream_tile(const Conv1dSegment& seg) {
  return seg.vec && seg.rows_per_tile == 1;
}

// Index of the segment that owns `tile`: the last one whose tile_begin is
// <= tile (segments owning no tile share their successor's begin).
__device__ __forceinline__ int find_segment(const Conv1dSegment* segs, int n, int64_t tile) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (segs[mid].tile_begin <= tile) lo = mid; else hi = mid - 1;
  }
  return lo;
}

// find_segment for a whole 32-lane team at once: every lane of the team
// calls it with the same tile and gets the same index. The segment table's
// entries are ~200 bytes apart, so each probe is a separate line; a binary
// search is a chain of log2(n) dependent loads before the tile can start.
// Up to 4 * kTeam segments: lane l reads tile_begin of segments l, l+32, ..
// (independent loads, one round trip) and the answer is the number of
// segments whose tile_begin <= tile, minus one (tile_begin is nondecreasing).
// More segments: a 32-ary search, one round trip per factor of 32.
__device__ __forceinline__ int find_segment_team(const Conv1dSegment* segs, int n, int64_t tile,
                                                 int lane) {
  constexpr int kT = detail::kTeam;
  if (n == 1) return 0;
  if (n <= 4 * kT) {
    bool le[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int i = r * kT + lane;
      le[r] = r * kT < n && i < n && segs[i].tile_begin <= tile;
    }
    int count = 0;
#pragma unroll
    for (int r = 0; r < 4; ++r) count += __popc(gpu_team_ballot(le[r]));
    return count - 1;
  }
  int lo = 0, hi = n - 1;  // the answer lies in [lo, hi]
  while (lo < hi) {
    const int step = (hi - lo + kT) / kT;  // ceil((hi - lo + 1) / kT)
    const int i = lo + lane * step;
    const bool le = i <= hi && segs[i].tile_begin <= tile;
    const int c = __popc(gpu_team_ballot(le));  // >= 1: lane 0 probes lo
    lo += (c - 1) * step;
    hi = min(hi, lo + step - 1);
  }
  return lo;
}

// The segment that owns `tile`, for a whole team (find_segment_team):
// when every segment owns uniform_tiles tiles, their quotient, which
// spares the tile's start a round trip to the table (64 x 1x2048x128 fp32
// forward 84.3 -> 85.2 % of a copy, H200, 2026-11-29). A lone segment
// needs neither (the division cost 4x2048x2048 bf16 forward 1.3 points).
__device__ __forceinline__ int find_tile_segment(const KParams& p, int64_t tile, int lane) {
  if (p.nseg == 1) return 0;
  if (p.uniform_tiles > 0) {
    return static_cast<int>(static_cast<uint32_t>(tile) / static_cast<uint32_t>(p.uniform_tiles));
  }
  return find_segment_team(p.segs, p.nseg, tile, lane);
}

// The pre-activation of the output whose window starts at x[e]: bias +
// w[0] x[e] + ... + w[W-1] x[e+W-1], summed in that order (x holds x̃, the
// W-1 elements before the outputs and then theirs).
template <int W, int M>
__device__ __forceinline__ float preact(const float (&w)[W], float bias, const float (&x)[M],
                                        int e) {
  float z = bias;
#pragma unroll
  for (int k = 0; k < W; ++k) z += w[k] * x[e + k];
  return z;
}

// Butterfly sum over a 32-lane team; every lane gets the same, order-fixed
// result.
__device__ __forceinline__ float team_sum(float v) {
#pragma unroll
  for (int m = 16; m >= 1; m >>= 1) v += gpu_shfl_xor(v, m, detail::kTeam);
  return v;
}

// 64-bit division and remainder with a 32-bit fast path: tile indices and
// channel counts almost always fit, and the 64-bit routine costs ~70
// instructions per call.
__device__ __forceinline__ int64_t div_fast(int64_t a, int64_t b) {
  if (((a | b) >> 31) == 0) {
    return static_cast<int64_t>(static_cast<uint32_t>(a) / static_cast<uint32_t>(b));
  }
  return a / b;
}
__device__ __forceinline__ int64_t mod_fast(int64_t a, int64_t b) {
  if (((a | b) >> 31) == 0) {
    return static_cast<int64_t>(static_cast<uint32_t>(a) % static_cast<uint32_t>(b));
  }
  return a % b;
}

// Element index within a segment, in memory order of the layout.
__device__ __forceinline__ int64_t elem_index(bool cl, int64_t b, int64_t d, int64_t t,
                                              int64_t D, int64_t L) {
  return cl ? (b * L + t) * D + d : (b * D + d) * L + t;
}

__device__ __forceinline__ float act_fwd(float z, bool silu) { return silu ? silu_f(z) : z; }


// Asynchronous 16-byte copies from global to shared memory, for loads that
// must stay in flight without holding registers: copy16_async issues one
// (bytes = 16, or 0 to fill zeros without reading src; both addresses
// 16-byte aligned), copy_async_commit closes the calling lane's group of
// copies issued since the last commit, and copy_async_wait<n> waits until
// at most n of the lane's groups are still in flight; a lane then sees its
// own copies. On NVIDIA sm_80+ these are cp.async (global data through L2
// only); elsewhere the copy is an ordinary load and store, and commit and
// wait do nothing.
__device__ __forceinline__ void copy16_async(void* dst_shared, const void* src, int bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(dst_shared));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(bytes)
               : "memory");
#else
  *static_cast<uint4*>(dst_shared) =
      bytes > 0 ? *static_cast<const uint4*>(src) : make_uint4(0u, 0u, 0u, 0u);
#endif
}
// copy16_async for 8 bytes (both addresses 8-byte aligned); through L1.
__device__ __forceinline__ void copy8_async(void* dst_shared, const void* src, int bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(dst_shared));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;" ::"r"(dst), "l"(src), "r"(bytes)
               : "memory");
#else
  *static_cast<uint2*>(dst_shared) =
      bytes > 0 ? *static_cast<const uint2*>(src) : make_uint2(0u, 0u);
#endif
}
__device__ __forceinline__ void copy_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
template <int kN>
__device__ __forceinline__ void copy_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;" ::"n"(kN) : "memory");
#endif
}

// Elements between the 16-byte boundary at or below `row` and `row` (the
// shifted vector grid, kVecShifted).
template <class S>
__device__ __forceinline__ int row_shift(const S* row) {
  return static_cast<int>((reinterpret_cast<uintptr_t>(row) & 15u) / sizeof(S));
}

// x̃ at position q of row `row` for q < L: x when q >= 0, else the initial
// state (zeros when absent, and before the state: the shifted grid asks
// for up to a vector more than W-1 elements before the row, which only
// outputs before the row use). Used for halos that fall outside the team.
template <class T>
__device__ __forceinline__ float x_tilde_cf(const KParams& p, const Conv1dSegment& seg,
                                            const typename T::S* xrow, int64_t row,
                                            int64_t q, int W) {
  if (q >= 0) return T::to_f(xrow[q]);
  if (!p.has_init || q < -(W - 1)) return 0.0f;
  const auto* init = static_cast<const typename T::S*>(seg.in(Role::kInitialStates));
  return T::to_f(init[row * (W - 1) + (W - 1) + q]);
}

// The elements of a vector on the shifted grid (kVecShifted) that lie in
// the row: dst is the vector's place, t0 its first element's row
// position; element e is stored when 0 <= t0 + e < L.
template <class T, int N>
__device__ __forceinline__ void store_in_row(typename T::S* dst, int64_t t0, int64_t L,
                                             const float (&v)[N]) {
#pragma unroll
  for (int e = 0; e < N; ++e) {
    if (t0 + e >= 0 && t0 + e < L) dst[e] = T::from_f(v[e]);
  }
}

// Channel-first halos, loaded directly (the neighbouring lanes load the same
// lines in the same instruction, so these hit L1 and add no DRAM traffic;
// issuing them with the main loads keeps every load of a team in flight at
// once). hist[i] = x̃ at pos - (W-1) + i.
template <class T, int N, int W>
__device__ __forceinline__ void load_left(const KParams& p, const Conv1dSegment& seg,
                                          const typename T::S* xrow, int64_t row, int64_t pos,
                                          float (&hist)[W - 1]) {
  if constexpr (N >= W - 1) {
    if (pos >= N) {
      float tmp[N];
      load_f<T, N>(xrow + pos - N, tmp);
#pragma unroll
      for (int i = 0; i < W - 1; ++i) hist[i] = tmp[N - (W - 1) + i];
      return;
    }
  }
#pragma unroll
  for (int i = 0; i < W - 1; ++i) hist[i] = x_tilde_cf<T>(p, seg, xrow, row, pos - (W - 1) + i, W);
}

// nxt[i] = v at pos + N + i (zero past L) for a row of length L.
template <class T, int N, int W>
__device__ __forceinline__ void load_right(const typename T::S* vrow, int64_t pos, int64_t L,
                                           float (&nxt)[W - 1]) {
  if constexpr (N >= W - 1) {
    if (pos + 2 * N <= L) {
      float tmp[N];
      load_f<T, N>(vrow + pos + N, tmp);
#pragma unroll
      for (int i = 0; i < W - 1; ++i) nxt[i] = tmp[i];
      return;
    }
  }
#pragma unroll
  for (int i = 0; i < W - 1; ++i) {
    const int64_t q = pos + N + i;
    nxt[i] = q < L ? T::to_f(vrow[q]) : 0.0f;
  }
}

}  // namespace conv1d::kernels::dev

#endif  // CONV1D_KERNELS_CONV1D_DEVICE_H_
