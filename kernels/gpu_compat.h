// Thin portability layer: the HIP runtime names the conv1d kernels, their
// launchers, tests and benchmarks use, mapped onto CUDA when building for
// NVIDIA. On AMD this is hip/hip_runtime.h itself.
//
// Used by everything under kernels/, tests/gpu and bench/kernels. Only the
// names actually used are mapped; add one here before using it. Pure macros
// and inline functions: no state, safe from any thread.
//
// Platform choice: HIP when compiled by a HIP compiler (__HIP__ or
// __HIP_PLATFORM_AMD__) or when CONV1D_USE_HIP is defined (host-only
// translation units of a HIP build); CUDA otherwise.
#ifndef CONV1D_KERNELS_GPU_COMPAT_H_
#define CONV1D_KERNELS_GPU_COMPAT_H_

#if defined(CONV1D_USE_HIP) || defined(__HIP__) || defined(__HIP_PLATFORM_AMD__)
#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__ 1
#endif
#include <hip/hip_fp16.h>
#include <hip/hip_runtime.h>
#define CONV1D_PLATFORM_HIP 1

#if defined(__HIPCC__)
#include <hip/hip_cooperative_groups.h>
// Shuffles within a 32-lane team. On wave64 hardware the width argument keeps
// each half of the wavefront separate, so a team is always 32 lanes.
template <class T>
__device__ __forceinline__ T gpu_shfl(T v, int src, int width) { return __shfl(v, src, width); }
template <class T>
__device__ __forceinline__ T gpu_shfl_xor(T v, int mask, int width) { return __shfl_xor(v, mask, width); }
// Ballot within the caller's 32-lane team (bit l: lane l of the team); on
// wave64 hardware the half-wavefront's 32 bits.
__device__ __forceinline__ unsigned gpu_team_ballot(bool pred) {
  return static_cast<unsigned>(__ballot(pred) >> (__lane_id() & 32));
}
// Orders the team's shared-memory writes before its later reads (a
// wavefront runs in lockstep; this stops the compiler moving them across).
__device__ __forceinline__ void gpu_team_sync() { __builtin_amdgcn_wave_barrier(); }
// Dependent launches (see the CUDA branch): HIP launches in stream order,
// so these are no-ops.
__device__ __forceinline__ void gpu_allow_dependents() {}
__device__ __forceinline__ void gpu_wait_prerequisites() {}
__device__ __forceinline__ void gpu_exit_after_prerequisites() {}
// Barrier of the whole grid, with its writes visible after it; only in a
// kernel launched by hipLaunchCooperativeKernel.
__device__ __forceinline__ void gpu_grid_sync() { cooperative_groups::this_grid().sync(); }
#endif

#else  // CUDA

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#define CONV1D_PLATFORM_CUDA 1

using hipError_t = cudaError_t;
using hipStream_t = cudaStream_t;
using hipEvent_t = cudaEvent_t;
using hipDeviceProp_t = cudaDeviceProp;
#define hipSuccess cudaSuccess
#define hipErrorInvalidValue cudaErrorInvalidValue
#define hipErrorNotSupported cudaErrorNotSupported
#define hipMemcpyHostToDevice cudaMemcpyHostToDevice
#define hipMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define hipMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define hipDeviceAttributeWarpSize cudaDevAttrWarpSize
#define hipDeviceAttributeMultiprocessorCount cudaDevAttrMultiProcessorCount
#define hipDeviceAttributeCooperativeLaunch cudaDevAttrCooperativeLaunch
#define hipLaunchCooperativeKernel cudaLaunchCooperativeKernel
#define hipGetDevice cudaGetDevice
#define hipSetDevice cudaSetDevice
#define hipGetDeviceCount cudaGetDeviceCount
#define hipGetDeviceProperties cudaGetDeviceProperties
#define hipDeviceGetAttribute cudaDeviceGetAttribute
#define hipOccupancyMaxActiveBlocksPerMultiprocessor cudaOccupancyMaxActiveBlocksPerMultiprocessor
#define hipGetLastError cudaGetLastError
#define hipPeekAtLastError cudaPeekAtLastError
#define hipGetErrorString cudaGetErrorString
#define hipMalloc cudaMalloc
#define hipFree cudaFree
#define hipMemcpy cudaMemcpy
#define hipMemcpyAsync cudaMemcpyAsync
#define hipMemset cudaMemset
#define hipMemsetAsync cudaMemsetAsync
#define hipDeviceSynchronize cudaDeviceSynchronize
#define hipStreamCreate cudaStreamCreate
#define hipStreamDestroy cudaStreamDestroy
#define hipStreamSynchronize cudaStreamSynchronize
#define hipEventCreate cudaEventCreate
#define hipEventDestroy cudaEventDestroy
#define hipEventRecord cudaEventRecord
#define hipEventSynchronize cudaEventSynchronize
#define hipEventElapsedTime cudaEventElapsedTime
#define hipHostMalloc(p, n, f) cudaHostAlloc((p), (n), (f))
#define hipHostMallocDefault cudaHostAllocDefault
#define hipHostMallocPortable cudaHostAllocPortable
#define hipHostMallocMapped cudaHostAllocMapped
#define hipHostGetDevicePointer cudaHostGetDevicePointer
#define hipHostFree cudaFreeHost
// Device memory shared between processes (IPC handles).
using hipIpcMemHandle_t = cudaIpcMemHandle_t;
#define hipIpcGetMemHandle cudaIpcGetMemHandle
#define hipIpcOpenMemHandle cudaIpcOpenMemHandle
#define hipIpcCloseMemHandle cudaIpcCloseMemHandle
#define hipIpcMemLazyEnablePeerAccess cudaIpcMemLazyEnablePeerAccess

#if defined(__CUDACC__)
#include <cooperative_groups.h>
template <class T>
__device__ __forceinline__ T gpu_shfl(T v, int src, int width) {
  return __shfl_sync(0xffffffffu, v, src, width);
}
template <class T>
__device__ __forceinline__ T gpu_shfl_xor(T v, int mask, int width) {
  return __shfl_xor_sync(0xffffffffu, v, mask, width);
}
// Ballot within the caller's 32-lane team (a warp); every lane must call it.
__device__ __forceinline__ unsigned gpu_team_ballot(bool pred) {
  return __ballot_sync(0xffffffffu, pred);
}
// Barrier of the caller's team with shared-memory ordering; every lane must
// call it.
__device__ __forceinline__ void gpu_team_sync() { __syncwarp(); }
// Programmatic dependent launch (sm_90 and later; no-ops before): a kernel
// launched as a dependent (LaunchKernel in conv1d_device.h) may start once
// every block of the kernel before it in the stream has called
// gpu_allow_dependents() or exited; gpu_wait_prerequisites() then blocks
// until that kernel has finished and its writes are visible.
__device__ __forceinline__ void gpu_allow_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void gpu_wait_prerequisites() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
// The same wait as a kernel's last statement, for a kernel that reads
// nothing the kernel before it wrote: it only holds the exit. No memory
// clobber, so the kernel's own loads and stores are scheduled as without it.
__device__ __forceinline__ void gpu_exit_after_prerequisites() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;");
#endif
}
// Barrier of the whole grid, with its writes visible after it; only in a
// kernel launched by hipLaunchCooperativeKernel (every block resident).
__device__ __forceinline__ void gpu_grid_sync() { cooperative_groups::this_grid().sync(); }
#endif

#endif  // platform

#endif  // CONV1D_KERNELS_GPU_COMPAT_H_
