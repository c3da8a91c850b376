// The gpu part of the backend factory, compiled only into builds that have
// the gpu backend (see CMakeLists.txt); backend_factory_nogpu.cc otherwise.
#include "server/backends/gpu/gpu_backend.h"
#include "server/frontend/backend_factory.h"

namespace conv1d {

bool GpuBackendBuilt() { return true; }

int VisibleGpuDevices() { return GpuBackend::VisibleDeviceCount(); }

absl::StatusOr<std::unique_ptr<Backend>> MakeGpuBackend(const BackendChoice& choice) {
  GpuBackendOptions options;
  options.devices = choice.devices;
  if (choice.lanes > 0) options.lanes_per_device = choice.lanes;
  options.lane_buffer_bytes = choice.lane_buffer_bytes;
  options.weight_cache_bytes = choice.weight_cache_bytes;
  options.host_pool_bytes = choice.host_pool_bytes;
  options.inject_fault = choice.inject_fault;
  options.observer = choice.observer;
  absl::StatusOr<std::unique_ptr<GpuBackend>> backend = GpuBackend::Create(options);
  if (!backend.ok()) return backend.status();
  return std::unique_ptr<Backend>(std::move(*backend));
}

}  // namespace conv1d
