// GpuBackend: the fused conv1d kernels behind the Backend interface, with
// every buffer allocated once at start.
//
// Per device: one device memory pool (lane buffers, kernel workspaces and a
// weight-cache region) and one pinned host pool (lane staging), sized from
// options or from the device's memory. Lanes are interleaved over devices
// (lane i runs on device i % num_devices) and each owns a stream, timing
// events, a pinned staging buffer and a device buffer of the same layout.
// A batch on a lane is: pack the segment table and all inputs into pinned
// staging (in parallel), one async H2D copy, one fused kernel launch, one
// async D2H copy, an event; then outputs are copied out to the requests.
// Requests larger than a lane are cut along B into several such rounds.
// Tensors that live in the host pool (host_buffers()) skip packing: they
// are copied by their own DMA straight from (and back to) the request.
// Several lanes per device let packing, copies and kernels of consecutive
// batches overlap. After start no device or pinned allocation happens
// (gpu::AllocationCount() stays flat).
//
// Clients' registered shared-memory regions: system regions are page-locked
// once at registration and move like host-pool tensors; device regions
// (IPC handles) are read and written in place by the kernels, on lanes of
// the region's device.
//
// A device that hits a sticky error stops serving: its lanes fail their
// batches with UNAVAILABLE and Health() reports the error; other devices go
// on.
//
// Thread-safety: RunBatch(lane) is called from one thread per lane (per the
// Backend contract); everything shared between lanes (weight caches, pack
// thread pool, device health) is thread-safe.
#ifndef CONV1D_SERVER_BACKENDS_GPU_GPU_BACKEND_H_
#define CONV1D_SERVER_BACKENDS_GPU_GPU_BACKEND_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/core/backend.h"
#include "server/core/observer.h"

namespace conv1d {

class ThreadPool;
namespace gpu {
class HostPool;
}

struct GpuBackendOptions {
  // Device indices to use; empty means every visible device.
  std::vector<int> devices;
  // Lanes (stream + staging) per device. Range 1..64.
  int lanes_per_device = 4;
  // Pinned staging and device buffer per lane, in bytes; 0 derives it from
  // device memory (1/128 of it, clamped to 64 MiB..512 MiB: at least four
  // times the scheduler's default max_batch_bytes, so a full batch fits in
  // one round).
  int64_t lane_buffer_bytes = 0;
  // Kernel workspace per lane (dweight partials), in bytes. >= 1 MiB.
  int64_t workspace_bytes = int64_t{128} << 20;
  // Device memory per device for registered weights; 0: 1/32 of device
  // memory, at most 4 GiB.
  int64_t weight_cache_bytes = 0;
  // Threads that pack and unpack staging buffers (shared by all lanes);
  // 0: min(16, hardware concurrency).
  int pack_threads = 0;
  // Page-locked host memory for request and response tensors
  // (host_buffers()), shared by all devices; tensors there of at least
  // direct_copy_bytes move by DMA with no staging memcpy. -1: no pool
  // (the server then uses heap memory); 0 derives it (1/32 of
  // physical memory, 64 MiB .. 4 GiB).
  int64_t host_pool_bytes = -1;
  // Smallest host-pool tensor copied by its own DMA (each copy costs a few
  // microseconds of runtime time, so small tensors do not go this way).
  int64_t direct_copy_bytes = int64_t{256} << 10;
  // Smaller host-pool tensors: with gather_small_host_tensors (and devices
  // that see page-locked memory at its host address) one copy kernel per
  // direction and batch gathers them from the pool into the lane's device
  // buffer and scatters the outputs back, reading and writing the bus
  // directly; otherwise they are packed through staging like heap tensors.
  bool gather_small_host_tensors = true;
  // With in_place_host_tensors, requests whose activations and states the
  // kernel moves in whole-line passes (kernels::Conv1dStreamsInPlace: short
  // forward rows of up to 32 elements or 32 vectors, and one-token updates:
  // decode, speculative-decode and short prefill steps) keep their small,
  // 16-byte aligned host-pool tensors where they are: the fused kernel
  // reads and writes them over the bus and neither copy kernel runs for
  // them, so a fused decode round is one table copy and one launch. Needs what gathering needs; weights are never used
  // in place (every tile of a row reads them).
  bool in_place_host_tensors = true;
  // Queue every lane's host-to-device work on one stream per device and its
  // device-to-host work on another (the kernels stay on the lane's stream,
  // ordered by events). Copies of different lanes then run one after the
  // other in each direction instead of sharing the bus at once, so one
  // lane's outputs move while the next lane's inputs do. false: each lane
  // queues everything on its own stream. Rounds whose DMAs move fewer than
  // shared_copy_min_bytes (in plus out) stay on the lane's stream: their
  // copies are short and the cross-stream waits would cost more than the
  // ordering gains. Bytes moved by the gather/scatter kernels do not count:
  // the kernels of several lanes use the bus better at the same time than
  // one after another (fused decode-fwd: see bench/runtime/README.md).
  bool shared_copy_streams = true;
  int64_t shared_copy_min_bytes = int64_t{1} << 20;
  // Queue a round's DMAs in each direction with one batch call
  // (cudaMemcpyBatchAsync on CUDA 12.8+; one call per copy elsewhere), which
  // lets the driver pipeline them: 1 MB forwards from the host pool went
  // from ~29 k to ~37 k req/s fused on an H100 (bench/runtime/README.md).
  bool batch_copies = true;
  // Test hook: "launch:N" fails every N-th fused launch of each lane,
  // "copy:N" every N-th queueing of its device-to-host copies, with a
  // refused-call error (not a sticky one): the batch fails, the device goes
  // on. Empty: none. INVALID_ARGUMENT for anything else.
  std::string inject_fault;
  Observer* observer = nullptr;  // not owned; may be null
};

class GpuBackend final : public Backend {
 public:
  // Number of devices the runtime reports; 0 when there is no usable driver
  // or device (what --backend=auto checks).
  static int VisibleDeviceCount();

  // Allocates every pool and lane. FAILED_PRECONDITION without a device,
  // INVALID_ARGUMENT naming a bad option, RESOURCE_EXHAUSTED when the pools
  // do not fit.
  static absl::StatusOr<std::unique_ptr<GpuBackend>> Create(
      const GpuBackendOptions& options);
  ~GpuBackend() override;

  const char* name() const override { return "gpu"; }
  std::vector<std::string> devices() const override;
  int num_lanes() const override;
  // One row of a request must fit a lane buffer with its slot padding.
  BackendLimits limits() const override;
  // Decode-session state slots in device memory (DeviceStateSlots): steps
  // read and write their state in place. One device only: with several,
  // UNIMPLEMENTED (a step must run on its slot's device).
  absl::StatusOr<std::unique_ptr<StateSlots>> CreateStateSlots(
      const StateSlotsOptions& options) override;
  absl::Status RunBatch(int lane, const BatchKey& key,
                        absl::Span<ConvSegment* const> segments,
                        BatchStats* stats) override;

  // OK while every device serves; otherwise the first sticky error.
  absl::Status Health() const override;
  bool LaneAvailable(int lane) const override;
  int32_t LaneDevice(int lane) const override;
  // Page-locked from the host pool while it has room, else heap memory;
  // null when the pool is off.
  std::shared_ptr<HostBufferProvider> host_buffers() const override { return host_buffers_; }
  // Page-locks registered system regions once (shared_regions.h): their
  // tensors then move like the host pool's.
  std::shared_ptr<HostMemoryPinner> host_memory_pinner() const override { return pinner_; }
  // Opens registered device regions (shared_regions.h): the kernels read
  // and write their tensors in place.
  std::shared_ptr<DeviceMemoryImporter> device_memory_importer() const override {
    return importer_;
  }
  int64_t lane_buffer_bytes() const { return lane_buffer_bytes_; }

  // Per-device and per-lane state (gpu_backend_internal.h), shared with
  // the lane executor.
  struct Device;
  struct Lane;

 private:

  GpuBackend() = default;
  absl::Status RunRounds(Lane& lane, const BatchKey& key,
                         absl::Span<ConvSegment* const> segments,
                         BatchStats* stats);
  void MarkDeviceFailed(Device& device, const absl::Status& status);

  GpuBackendOptions options_;
  int64_t lane_buffer_bytes_ = 0;
  std::vector<std::unique_ptr<Device>> devices_;
  std::vector<std::unique_ptr<Lane>> lanes_;
  std::unique_ptr<ThreadPool> pack_pool_;
  // Shared with the deleters of the buffers it hands out, which may outlive
  // the backend; null when the pool is off.
  std::shared_ptr<gpu::HostPool> host_pool_;
  std::shared_ptr<HostBufferProvider> host_buffers_;
  std::shared_ptr<HostMemoryPinner> pinner_;
  std::shared_ptr<DeviceMemoryImporter> importer_;
  // gather_small_host_tensors is on and every device sees the host pool and
  // the lanes' copy tables at their host addresses (unified addressing).
  bool gather_small_host_tensors_ = false;
};

}  // namespace conv1d

#endif  // CONV1D_SERVER_BACKENDS_GPU_GPU_BACKEND_H_
