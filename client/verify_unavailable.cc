// Stand-in reference for builds without the CPU backend (see verify.h).
#include "client/verify.h"

namespace conv1d {

bool ReferenceAvailable() { return false; }

absl::StatusOr<ReferenceOutputs> ComputeReference(const ReferenceProblem&) {
  return absl::UnimplementedError("this build has no CPU backend to verify against");
}

}  // namespace conv1d
