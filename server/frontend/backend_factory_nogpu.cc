// The gpu part of the backend factory for builds without a GPU toolchain.
#include "server/frontend/backend_factory.h"

namespace conv1d {

bool GpuBackendBuilt() { return false; }

int VisibleGpuDevices() { return 0; }

absl::StatusOr<std::unique_ptr<Backend>> MakeGpuBackend(const BackendChoice&) {
  return absl::FailedPreconditionError(
      "backend: this build has no gpu backend (configure with CONV1D_GPU=CUDA "
      "or HIP); use --backend=cpu or auto");
}

}  // namespace conv1d
