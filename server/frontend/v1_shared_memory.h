// Shared-memory tensors of conv1d.v1: request tensors whose bytes are in a
// registered system shared-memory region (Tensor.shared_memory) and outputs
// written into one (the requests' output_shared_memory), with the regions
// registered through the inference protocol (shm_registry.h).
//
// Conv1dService calls AttachSharedInputs after parsing (the region bytes
// become DetachedTensors entries with the region's Placement, which
// validation reads like any other), ResolveSharedOutputs after validation
// (ranges checked, nothing allocated), and, around Bind*Response,
// HideSharedOutputs / PlaceSharedOutputs so that the response carries no
// bytes for them and the backend writes into the region.
//
// Regions are resolved for the calling principal (`user`): another
// principal's region is NOT_FOUND, as an unregistered one (PERMISSION_DENIED
// for an admin), see shm_registry.h's Ownership.
//
// Errors are INVALID_ARGUMENT naming the field (NOT_FOUND for an
// unregistered region, FAILED_PRECONDITION for a shrunk one).
// Not synchronized: the values belong to one call.
#ifndef CONV1D_SERVER_FRONTEND_V1_SHARED_MEMORY_H_
#define CONV1D_SERVER_FRONTEND_V1_SHARED_MEMORY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "google/protobuf/message.h"
#include "server/core/shm_registry.h"
#include "server/frontend/validation.h"
#include "server/frontend/wire_tensors.h"

namespace conv1d {

// Every Tensor of `request` (top level and inline weights) with
// shared_memory set gets an entry in `detached` for the product(shape) *
// sizeof(dtype) bytes at that place, and its region's lease in `leases`
// (to be cleared before the call is answered). Tensors whose dtype or shape
// cannot give a size are left to validation, which names them. `shm` may be
// null.
absl::Status AttachSharedInputs(const google::protobuf::Message& request,
                                const SharedMemoryRegistry* shm, const RegionUser& user,
                                DetachedTensors* detached,
                                std::vector<std::shared_ptr<void>>* leases);

// One output bound to a region.
struct SharedOutput {
  std::string field;  // response field name ("y", "conv_state", ...)
  OutputView* view = nullptr;
  int64_t bytes = 0;
  std::string region;
  SharedSpan span;
};

// Checks the request's output_shared_memory against the outputs `call`
// returns and resolves each range (leases into `leases`).
absl::Status ResolveSharedOutputs(const google::protobuf::Message& request,
                                  const SharedMemoryRegistry* shm, const RegionUser& user,
                                  ValidatedCall* call,
                                  std::vector<SharedOutput>* outputs,
                                  std::vector<std::shared_ptr<void>>* leases);

// Before Bind*Response: the outputs' byte counts go to zero so that the
// response allocates nothing for them.
void HideSharedOutputs(std::vector<SharedOutput>* outputs);

// After Bind*Response: the views point into the regions, and the response
// tensors carry the region reference instead of bytes.
void PlaceSharedOutputs(std::vector<SharedOutput>* outputs,
                        google::protobuf::Message* response);

}  // namespace conv1d

#endif  // CONV1D_SERVER_FRONTEND_V1_SHARED_MEMORY_H_
