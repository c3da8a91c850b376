#include "server/backends/gpu/gpu_backend.h"

#include <unistd.h>

#include <algorithm>
#include <functional>
#include <thread>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "server/util/thread_pool.h"
#include "server/backends/gpu/batch_layout.h"
#include "server/backends/gpu/device_state_slots.h"
#include "server/core/partitioned_state_slots.h"
#include "server/backends/gpu/gpu_backend_internal.h"
#include "server/backends/gpu/host_pool.h"
#include "server/backends/gpu/shared_regions.h"
#include "server/util/thread_pool.h"

namespace conv1d {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;

int64_t AlignUp(int64_t n) {
  return (n + gpu::kSlotAlignBytes - 1) / gpu::kSlotAlignBytes *
         gpu::kSlotAlignBytes;
}

absl::Status ValidateOptions(const GpuBackendOptions& o) {
  if (o.lanes_per_device < 1 || o.lanes_per_device > 64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "lanes_per_device must be in 1..64, got ", o.lanes_per_device));
  }
  if (o.lane_buffer_bytes != 0 && o.lane_buffer_bytes < kMiB) {
    return absl::InvalidArgumentError(absl::StrCat(
        "lane_buffer_bytes must be 0 (derive) or >= 1 MiB, got ",
        o.lane_buffer_bytes));
  }
  if (o.workspace_bytes < kMiB) {
    return absl::InvalidArgumentError(absl::StrCat(
        "workspace_bytes must be >= 1 MiB, got ", o.workspace_bytes));
  }
  if (o.host_pool_bytes < -1 || o.direct_copy_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "host_pool_bytes must be -1 (off), 0 (derive) or positive, and "
        "direct_copy_bytes >= 0; got ", o.host_pool_bytes, " and ", o.direct_copy_bytes));
  }
  if (o.shared_copy_min_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shared_copy_min_bytes must be >= 0, got ", o.shared_copy_min_bytes));
  }
  if (o.weight_cache_bytes < 0 || o.pack_threads < 0) {
    return absl::InvalidArgumentError(
        "weight_cache_bytes and pack_threads must be >= 0");
  }
  return absl::OkStatus();
}

// GpuBackendOptions::inject_fault: "", "launch:N" or "copy:N" (N >= 1).
absl::StatusOr<LaneFault> ParseFault(const std::string& spec) {
  LaneFault fault;
  if (spec.empty()) return fault;
  const size_t colon = spec.find(':');
  const std::string where = spec.substr(0, colon);
  int64_t every = 0;
  if (colon != std::string::npos && absl::SimpleAtoi(spec.substr(colon + 1), &every) &&
      every >= 1 && (where == "launch" || where == "copy")) {
    fault.point = where == "launch" ? FaultPoint::kLaunch : FaultPoint::kCopy;
    fault.every = every;
    return fault;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "inject_fault must be empty, \"launch:N\" or \"copy:N\" with N >= 1, got \"", spec, "\""));
}

}  // namespace

int GpuBackend::VisibleDeviceCount() {
  int n = 0;
  if (hipGetDeviceCount(&n) != hipSuccess) {
    (void)hipGetLastError();
    return 0;
  }
  return n;
}

absl::StatusOr<std::unique_ptr<GpuBackend>> GpuBackend::Create(
    const GpuBackendOptions& options) {
  if (absl::Status st = ValidateOptions(options); !st.ok()) return st;
  absl::StatusOr<LaneFault> parsed_fault = ParseFault(options.inject_fault);
  if (!parsed_fault.ok()) return parsed_fault.status();
  const LaneFault fault = *parsed_fault;
  const int visible = VisibleDeviceCount();
  if (visible == 0) {
    return absl::FailedPreconditionError("no GPU device is visible");
  }
  std::vector<int> ids = options.devices;
  if (ids.empty()) {
    for (int i = 0; i < visible; ++i) ids.push_back(i);
  }
  for (int id : ids) {
    if (id < 0 || id >= visible) {
      return absl::InvalidArgumentError(absl::StrCat(
          "devices: index ", id, " out of range, ", visible, " visible"));
    }
  }

  auto backend = std::unique_ptr<GpuBackend>(new GpuBackend());
  backend->options_ = options;
  const int pack_threads =
      options.pack_threads > 0
          ? options.pack_threads
          : std::min<int>(16, std::max(1u, std::thread::hardware_concurrency()));
  auto pool = ThreadPool::Create(ThreadPoolOptions{pack_threads});
  if (!pool.ok()) return pool.status();
  backend->pack_pool_ = std::move(*pool);

  // Size the lanes from the smallest selected device so every lane is alike.
  int64_t min_memory = INT64_MAX;
  for (int id : ids) {
    hipDeviceProp_t prop;
    if (absl::Status st = gpu::GpuStatus(hipGetDeviceProperties(&prop, id),
                                         "hipGetDeviceProperties");
        !st.ok()) {
      return st;
    }
    auto dev = std::make_unique<Device>();
    dev->index = id;
    dev->name = prop.name;
    dev->total_memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
    min_memory = std::min(min_memory, dev->total_memory_bytes);
    backend->devices_.push_back(std::move(dev));
  }
  backend->lane_buffer_bytes_ =
      options.lane_buffer_bytes > 0
          ? AlignUp(options.lane_buffer_bytes)
          : std::clamp<int64_t>(AlignUp(min_memory / 128), 64 * kMiB, 512 * kMiB);
  const int64_t lane_bytes = backend->lane_buffer_bytes_;
  const int64_t ws_bytes = AlignUp(options.workspace_bytes);

  for (auto& dev : backend->devices_) {
    const int64_t cache_bytes =
        options.weight_cache_bytes > 0
            ? AlignUp(options.weight_cache_bytes)
            : std::min<int64_t>(4 * kGiB, AlignUp(dev->total_memory_bytes / 32));
    dev->device_pool_bytes =
        options.lanes_per_device * (lane_bytes + ws_bytes) + cache_bytes;
    dev->pinned_pool_bytes = options.lanes_per_device * (lane_bytes + kCopyTablesBytes);
    absl::Status st = gpu::GpuStatus(hipSetDevice(dev->index), "hipSetDevice");
    if (st.ok()) {
      st = gpu::GpuStatus(gpu::DeviceAlloc(&dev->device_pool, dev->device_pool_bytes),
                          "allocating the device pool");
    }
    if (st.ok()) {
      st = gpu::GpuStatus(gpu::PinnedAlloc(&dev->pinned_pool, dev->pinned_pool_bytes),
                          "allocating the pinned pool");
    }
    if (!st.ok()) {
      (void)hipGetLastError();
      return absl::ResourceExhaustedError(absl::StrCat(
          st.message(), " on device ", dev->index, " (", dev->device_pool_bytes,
          " device + ", dev->pinned_pool_bytes,
          " pinned bytes; lower lanes_per_device, lane_buffer_bytes or "
          "weight_cache_bytes)"));
    }
    if (options.shared_copy_streams) {
      for (hipStream_t* stream : {&dev->h2d_stream, &dev->d2h_stream}) {
        if (st.ok()) {
          st = gpu::GpuStatus(hipStreamCreateWithFlags(stream, hipStreamNonBlocking),
                              "creating a copy stream");
        }
      }
      if (!st.ok()) return st;
    }
    char* carve = static_cast<char*>(dev->device_pool) +
                  options.lanes_per_device * (lane_bytes + ws_bytes);
    dev->weights = std::make_unique<gpu::WeightCache>(dev->index, carve, cache_bytes);
    if (options.observer != nullptr) {
      options.observer->OnPoolBytes("device_reserved", dev->index, dev->device_pool_bytes);
      options.observer->OnPoolBytes("device_in_use", dev->index,
                                    options.lanes_per_device * (lane_bytes + ws_bytes));
      options.observer->OnPoolBytes("pinned", dev->index, dev->pinned_pool_bytes);
    }
  }

  // The host pool: page-locked for every device, made once like the rest.
  int64_t host_bytes = options.host_pool_bytes;
  if (host_bytes == 0) {
    const int64_t phys = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) *
                         static_cast<int64_t>(sysconf(_SC_PAGE_SIZE));
    host_bytes = std::clamp<int64_t>(phys / 32, 64 * kMiB, 4 * kGiB);
  }
  if (host_bytes > 0) {
    void* region = nullptr;
    absl::Status st = gpu::GpuStatus(hipSetDevice(backend->devices_[0]->index), "hipSetDevice");
    if (st.ok()) {
      st = gpu::GpuStatus(gpu::PinnedAlloc(&region, host_bytes, /*portable=*/true),
                          "allocating the host pool");
    }
    if (!st.ok()) {
      (void)hipGetLastError();
      return absl::ResourceExhaustedError(absl::StrCat(
          st.message(), " (", host_bytes, " page-locked bytes; lower host_pool_bytes "
          "or turn the pool off with -1)"));
    }
    // The copy kernels take host addresses as they are: every device must
    // see the pool and its own page-locked memory there.
    bool visible = options.gather_small_host_tensors;
    for (const auto& dev : backend->devices_) {
      for (void* p : {region, dev->pinned_pool}) {
        void* device_view = nullptr;
        if (visible && (hipSetDevice(dev->index) != hipSuccess ||
                        hipHostGetDevicePointer(&device_view, p, 0) != hipSuccess ||
                        device_view != p)) {
          (void)hipGetLastError();
          visible = false;
        }
      }
    }
    backend->gather_small_host_tensors_ = visible;
    std::function<void(int64_t)> on_use;
    if (options.observer != nullptr) {
      on_use = [observer = options.observer, device = backend->devices_[0]->index](
                   int64_t in_use) { observer->OnPoolBytes("host_in_use", device, in_use); };
    }
    backend->host_pool_ = std::shared_ptr<gpu::HostPool>(
        new gpu::HostPool(region, host_bytes, std::move(on_use)), [region](gpu::HostPool* pool) {
          delete pool;
          gpu::PinnedFree(region);
        });
    std::function<void(int64_t)> on_miss;
    if (options.observer != nullptr) {
      on_miss = [observer = options.observer](int64_t bytes) { observer->OnHostPoolMiss(bytes); };
    }
    backend->host_buffers_ =
        std::make_shared<gpu::PooledHostBuffers>(backend->host_pool_, std::move(on_miss));
    if (options.observer != nullptr) {
      const Device& first = *backend->devices_[0];
      options.observer->OnPoolBytes("pinned", first.index, first.pinned_pool_bytes + host_bytes);
    }
  }

  std::vector<int> indices;
  for (const auto& dev : backend->devices_) indices.push_back(dev->index);
  backend->pinner_ = std::make_shared<gpu::GpuHostMemoryPinner>(
      indices, /*same_address=*/backend->gather_small_host_tensors_);
  backend->importer_ = std::make_shared<gpu::GpuDeviceMemoryImporter>(indices);

  // Lanes interleave over devices so that light load spreads across them.
  const int ndev = static_cast<int>(backend->devices_.size());
  for (int i = 0; i < ndev * options.lanes_per_device; ++i) {
    auto lane = std::make_unique<Lane>();
    lane->index = i;
    Device& dev = *backend->devices_[i % ndev];
    const int slot = i / ndev;
    lane->device = &dev;
    lane->pinned = static_cast<char*>(dev.pinned_pool) + slot * lane_bytes;
    lane->buffer = static_cast<char*>(dev.device_pool) + slot * (lane_bytes + ws_bytes);
    lane->workspace = lane->buffer + lane_bytes;
    lane->gather_table = reinterpret_cast<kernels::BatchCopyChunk*>(
        static_cast<char*>(dev.pinned_pool) + options.lanes_per_device * lane_bytes +
        slot * kCopyTablesBytes);
    lane->scatter_table = lane->gather_table + kCopyTableEntries;
    lane->workspace_bytes = ws_bytes;
    lane->table.reserve(1024);
    lane->fault = fault;
    absl::Status st = gpu::GpuStatus(hipSetDevice(dev.index), "hipSetDevice");
    if (st.ok()) {
      st = gpu::GpuStatus(hipStreamCreateWithFlags(&lane->stream, hipStreamNonBlocking),
                          "creating a lane stream");
    }
    for (hipEvent_t& ev : lane->events) {
      if (st.ok()) st = gpu::GpuStatus(hipEventCreate(&ev), "creating a lane event");
    }
    if (st.ok()) st = gpu::GpuStatus(hipStreamSynchronize(lane->stream), "lane set-up");
    backend->lanes_.push_back(std::move(lane));
    if (!st.ok()) return st;
  }
  return backend;
}

GpuBackend::~GpuBackend() {
  for (auto& lane : lanes_) {
    (void)hipSetDevice(lane->device->index);
    if (lane->stream != nullptr) {
      (void)hipStreamSynchronize(lane->stream);
      (void)hipStreamDestroy(lane->stream);
    }
    for (hipEvent_t ev : lane->events) {
      if (ev != nullptr) (void)hipEventDestroy(ev);
    }
  }
  for (auto& dev : devices_) {
    (void)hipSetDevice(dev->index);
    for (hipStream_t stream : {dev->h2d_stream, dev->d2h_stream}) {
      if (stream != nullptr) {
        (void)hipStreamSynchronize(stream);
        (void)hipStreamDestroy(stream);
      }
    }
    gpu::DeviceFree(dev->device_pool);
    gpu::PinnedFree(dev->pinned_pool);
  }
}

std::vector<std::string> GpuBackend::devices() const {
  std::vector<std::string> names;
  for (const auto& dev : devices_) {
    names.push_back(absl::StrCat(dev->index, ": ", dev->name));
  }
  return names;
}

int GpuBackend::num_lanes() const { return static_cast<int>(lanes_.size()); }

absl::StatusOr<std::unique_ptr<StateSlots>> GpuBackend::CreateStateSlots(
    const StateSlotsOptions& options) {
  // One pool per device, each with an equal share of the slots (rounded
  // up); with several devices, slots alternate between them.
  const int32_t n = static_cast<int32_t>(devices_.size());
  std::vector<std::unique_ptr<StateSlots>> parts;
  for (const auto& dev : devices_) {
    StateSlotsOptions on_device = options;
    on_device.device = dev->index;
    on_device.num_slots = (options.num_slots + n - 1) / n;
    absl::StatusOr<std::unique_ptr<gpu::DeviceStateSlots>> slots =
        gpu::DeviceStateSlots::Create(on_device);
    if (!slots.ok()) return slots.status();
    parts.push_back(std::move(*slots));
  }
  if (n == 1) return std::move(parts[0]);
  absl::StatusOr<std::unique_ptr<PartitionedStateSlots>> all =
      PartitionedStateSlots::Create(std::move(parts));
  if (!all.ok()) return all.status();
  return std::unique_ptr<StateSlots>(std::move(*all));
}

BackendLimits GpuBackend::limits() const {
  // A row's tensors, each with up to a slot's alignment padding, after the
  // table entry (batch_layout.h): what PlanRounds can always place.
  BackendLimits limits;
  limits.max_row_bytes = lane_buffer_bytes_ - AlignUp(sizeof(kernels::Conv1dSegment)) -
                         2 * kNumRoles * gpu::kSlotAlignBytes;
  limits.limit_flag = "lane_buffer_bytes";
  return limits;
}

absl::Status GpuBackend::Health() const {
  for (const auto& dev : devices_) {
    if (dev->failed.load(std::memory_order_acquire)) {
      absl::MutexLock lock(&dev->mu);
      return dev->error;
    }
  }
  return absl::OkStatus();
}

bool GpuBackend::LaneAvailable(int lane) const {
  return !lanes_[lane]->device->failed.load(std::memory_order_acquire);
}

int32_t GpuBackend::LaneDevice(int lane) const { return lanes_[lane]->device->index; }

void GpuBackend::MarkDeviceFailed(Device& device, const absl::Status& status) {
  {
    absl::MutexLock lock(&device.mu);
    if (device.failed.load(std::memory_order_relaxed)) return;
    device.error = absl::UnavailableError(absl::StrCat(
        "device ", device.index, " (", device.name,
        ") stopped serving after an unrecoverable error: ", status.message()));
    device.failed.store(true, std::memory_order_release);
  }
  if (options_.observer != nullptr) {
    options_.observer->OnDeviceError(device.index, std::string(status.message()));
  }
}

}  // namespace conv1d
