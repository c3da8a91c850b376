#include "server/frontend/backend_factory.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/backends/cpu/cpu_backend.h"
#include "server/backends/echo/echo_backend.h"

namespace conv1d {

std::vector<std::string> BackendNames() {
  if (GpuBackendBuilt()) return {"auto", "gpu", "cpu", "echo"};
  return {"auto", "cpu", "echo"};
}

absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(const BackendChoice& choice) {
  std::string name = choice.name;
  if (name == "auto") name = VisibleGpuDevices() > 0 ? "gpu" : "cpu";
  if (name == "gpu") return MakeGpuBackend(choice);
  if (!choice.inject_fault.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gpu_inject_fault: applies to the gpu backend only, not \"", name, "\""));
  }
  if (name == "cpu") {
    CpuBackendOptions options;
    options.threads = choice.threads;
    if (choice.lanes > 0) options.lanes = choice.lanes;
    absl::StatusOr<std::unique_ptr<CpuBackend>> backend = CpuBackend::Create(options);
    if (!backend.ok()) return backend.status();
    return std::unique_ptr<Backend>(std::move(*backend));
  }
  if (name == "echo") {
    EchoBackendOptions options;
    if (choice.lanes > 0) options.lanes = choice.lanes;
    absl::StatusOr<std::unique_ptr<EchoBackend>> backend = EchoBackend::Create(options);
    if (!backend.ok()) return backend.status();
    return std::unique_ptr<Backend>(std::move(*backend));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("backend: unknown name \"", choice.name, "\", expected one of ",
                   absl::StrJoin(BackendNames(), ", ")));
}

}  // namespace conv1d
