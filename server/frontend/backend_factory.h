// The one place that turns a backend name (`--backend`) into a Backend.
//
// Used by Server::Create. Knows every backend the build contains: "cpu" and
// "echo" always; "auto" picks the best one present (the CPU backend today;
// a GPU backend, when added, is chosen here when a device is visible).
//
// Pure factory; safe from any thread.
#ifndef CONV1D_SERVER_FRONTEND_BACKEND_FACTORY_H_
#define CONV1D_SERVER_FRONTEND_BACKEND_FACTORY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/core/backend.h"

namespace conv1d {

struct BackendChoice {
  // "auto", "cpu" or "echo".
  std::string name = "auto";
  // CPU backend compute threads; 0 = every core.
  int threads = 0;
  // Lanes (batches in flight at once); 0 = the backend's default.
  int lanes = 0;
};

// The names MakeBackend accepts, for --help and error messages.
std::vector<std::string> BackendNames();

// INVALID_ARGUMENT for an unknown name; the backend's own Create error
// otherwise.
absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(const BackendChoice& choice);

}  // namespace conv1d

#endif  // CONV1D_SERVER_FRONTEND_BACKEND_FACTORY_H_
