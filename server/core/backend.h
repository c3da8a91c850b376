// The interface every compute backend implements (cpu, echo, gpu).
//
// A backend computes a fused batch: several ConvSegments sharing one
// BatchKey, each with its own B, L, weights and states. The scheduler runs
// one thread per lane and calls RunBatch(lane, ...) only from that lane's
// thread, so state kept per lane needs no lock; anything shared between
// lanes must be thread-safe. Backends are created by their own factory
// (e.g. CpuBackend::Create) and never see gRPC, protobuf or the scheduler.
//
// Nothing on the request path calls down into a backend before the
// scheduler hands it a batch: what a frontend needs to know (limits, host
// memory) it reads once at start-up from limits() and host_buffers().
#ifndef CONV1D_SERVER_CORE_BACKEND_H_
#define CONV1D_SERVER_CORE_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "server/core/conv_problem.h"
#include "server/core/host_buffers.h"
#include "server/core/memory_access.h"
#include "server/core/state_slots.h"

namespace conv1d {

// Stage times of one RunBatch, in seconds; backends fill what applies.
struct BatchStats {
  double pack_seconds = 0;
  double h2d_seconds = 0;
  double compute_seconds = 0;
  double d2h_seconds = 0;
  int64_t h2d_bytes = 0;
  int64_t d2h_bytes = 0;
  // Bytes the host copied into or out of staging (pack + unpack).
  int64_t staged_bytes = 0;
  // Bytes a kernel read or wrote in host memory where the request keeps
  // them, with no copy (not in h2d_bytes or d2h_bytes).
  int64_t in_place_bytes = 0;
  int32_t launches = 0;  // kernel launches (or CPU passes) used
};

// What a backend can serve, read once at start-up (a snapshot: it does not
// change while the backend lives).
struct BackendLimits {
  // Most bytes one row (B = 1) of a request may move, all its tensors and
  // its weights together (core OneRowBytes); larger requests are refused
  // with RESOURCE_EXHAUSTED naming `limit_flag`. -1: no bound.
  int64_t max_row_bytes = -1;
  // The server flag that raises max_row_bytes, for the error message.
  const char* limit_flag = "";
};

class Backend {
 public:
  virtual ~Backend() = default;

  // "cpu", "echo", "gpu".
  virtual const char* name() const = 0;
  // Human-readable device names this backend computes on.
  virtual std::vector<std::string> devices() const = 0;
  // How many batches may run at once; the scheduler starts this many lanes.
  virtual int num_lanes() const = 0;

  // See BackendLimits. Thread-safe; constant over the backend's life.
  virtual BackendLimits limits() const { return BackendLimits{}; }

  // OK while the backend can serve; otherwise why not (e.g. a device hit an
  // unrecoverable error). The server reports NOT_SERVING while this fails.
  // Thread-safe.
  virtual absl::Status Health() const { return absl::OkStatus(); }

  // False when lane `lane` must not take batches (its device failed); the
  // scheduler leaves such lanes idle. Thread-safe.
  virtual bool LaneAvailable(int lane) const { return true; }

  // The device lane `lane` computes on, or -1 for a lane that may take any
  // key. A lane of device d takes only keys whose BatchKey::device is -1 or
  // d (tensors in device memory are computed where they are). Fixed for the
  // backend's life; thread-safe.
  virtual int32_t LaneDevice(int lane) const { return -1; }

  // Host memory for request and response tensors: the backend's
  // page-locked pool, or null when it has none (the server then uses
  // HeapHostBuffers). Shared with the frontends for the backend's life and
  // beyond (buffers may outlive it). Thread-safe.
  virtual std::shared_ptr<HostBufferProvider> host_buffers() const { return nullptr; }

  // Page-locks clients' registered system shared-memory regions so that
  // they move like host_buffers() memory (memory_access.h); null when the
  // backend has no use for it (regions are then staged). Thread-safe; may
  // outlive the backend.
  virtual std::shared_ptr<HostMemoryPinner> host_memory_pinner() const { return nullptr; }

  // Opens device memory exported by co-located processes (registered
  // device regions, read and written in place by the backend's kernels);
  // null when the backend cannot compute on such memory (registration is
  // then refused). Thread-safe; may outlive the backend.
  virtual std::shared_ptr<DeviceMemoryImporter> device_memory_importer() const {
    return nullptr;
  }

  // The decode sessions' state slots (state_slots.h), made once at start:
  // memory the backend's update computes read and write in place, as the
  // conv_state and conv_state_out of session steps. Default: UNIMPLEMENTED,
  // i.e. the backend serves no sessions. Called once, before serving.
  virtual absl::StatusOr<std::unique_ptr<StateSlots>> CreateStateSlots(
      const StateSlotsOptions& options) {
    return absl::UnimplementedError(
        absl::StrCat("the ", name(), " backend does not serve decode sessions"));
  }

  // Computes every segment and writes all requested outputs. Blocking.
  // REQUIRES: 0 <= lane < num_lanes(); every segment matches `key`; called
  // from one thread per lane. A non-OK status fails the whole batch.
  virtual absl::Status RunBatch(int lane, const BatchKey& key,
                                absl::Span<ConvSegment* const> segments,
                                BatchStats* stats) = 0;
};

// What the frontends know of a backend: read once at start-up, so that no
// request calls down into it.
struct BackendInfo {
  std::string name;
  std::vector<std::string> devices;
  BackendLimits limits;
  // The backend's host_buffers(), or HeapHostBuffers; never null.
  std::shared_ptr<HostBufferProvider> host_buffers;

  static BackendInfo Of(Backend& backend);
};

}  // namespace conv1d

#endif  // CONV1D_SERVER_CORE_BACKEND_H_
