// The one place that turns a backend name (`--backend`) into a Backend.
//
// Used by Server::Create. Knows every backend the build contains: "cpu" and
// "echo" always, "gpu" in builds with a GPU toolchain; "auto" picks "gpu"
// when the build has it and a device is visible, else "cpu".
//
// Pure factory; safe from any thread.
#ifndef CONV1D_SERVER_FRONTEND_BACKEND_FACTORY_H_
#define CONV1D_SERVER_FRONTEND_BACKEND_FACTORY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/core/backend.h"
#include "server/core/observer.h"

namespace conv1d {

struct BackendChoice {
  // "auto", "cpu" or "echo".
  std::string name = "auto";
  // CPU backend compute threads; 0 = every core.
  int threads = 0;
  // Lanes (batches in flight at once); 0 = the backend's default. For the
  // gpu backend: lanes per device.
  int lanes = 0;
  // gpu backend: device indices (empty = all visible), per-lane staging
  // bytes (0 = derived from device memory), registered-weights cache bytes
  // per device (0 = derived).
  std::vector<int> devices;
  int64_t lane_buffer_bytes = 0;
  int64_t weight_cache_bytes = 0;
  // gpu backend: page-locked host pool for request and response tensors
  // (Backend::host_buffers); 0 = derived from physical memory, -1 = none.
  int64_t host_pool_bytes = 0;
  // gpu backend, testing only: GpuBackendOptions::inject_fault.
  std::string inject_fault;
  // Receives pool and device-error reports; not owned, may be null.
  Observer* observer = nullptr;
};

// The names MakeBackend accepts, for --help and error messages.
std::vector<std::string> BackendNames();

// The gpu backend when this build has one: "gpu" requested by name fails
// with FAILED_PRECONDITION in builds without it. `*present` says whether a
// device is visible (for "auto"). Defined in backend_factory_gpu.cc or
// backend_factory_nogpu.cc, whichever the build selects.
bool GpuBackendBuilt();
int VisibleGpuDevices();
absl::StatusOr<std::unique_ptr<Backend>> MakeGpuBackend(const BackendChoice& choice);

// INVALID_ARGUMENT for an unknown name; the backend's own Create error
// otherwise.
absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(const BackendChoice& choice);

}  // namespace conv1d

#endif  // CONV1D_SERVER_FRONTEND_BACKEND_FACTORY_H_
