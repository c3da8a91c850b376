// CpuBackend: the Backend that computes on the host CPU with CpuConvSegment.
// It is the service's default when no GPU is present and the embedded
// backend for tests. One ThreadPool, created in Create() and shared by every
// lane, runs the rows of each batch; segments too small to split are spread
// across the pool whole.
//
// Thread-safety: RunBatch may be called concurrently from different lanes
// (the pool takes concurrent loops).
#ifndef CONV1D_SERVER_BACKENDS_CPU_CPU_BACKEND_H_
#define CONV1D_SERVER_BACKENDS_CPU_CPU_BACKEND_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "server/util/thread_pool.h"
#include "server/core/backend.h"
#include "server/core/conv_problem.h"

namespace conv1d {

struct CpuBackendOptions {
  // Compute threads (including the lane thread that calls RunBatch); 0 means
  // std::thread::hardware_concurrency(). Valid range 0..4096.
  int threads = 0;
  // Lanes the scheduler starts; valid range 1..1024. Two let one batch's
  // scatter/gather overlap the next batch's compute.
  int lanes = 2;
};

class CpuBackend final : public Backend {
 public:
  // INVALID_ARGUMENT when an option is out of range.
  static absl::StatusOr<std::unique_ptr<CpuBackend>> Create(CpuBackendOptions options);

  const char* name() const override { return "cpu"; }
  std::vector<std::string> devices() const override;
  int num_lanes() const override { return lanes_; }

  // Checks presence and sizes of the segment's tensors for `key`.

  // Host memory (HostStateSlots); steps update it in place.
  absl::StatusOr<std::unique_ptr<StateSlots>> CreateStateSlots(
      const StateSlotsOptions& options) override {
    absl::StatusOr<std::unique_ptr<HostStateSlots>> slots = HostStateSlots::Create(options);
    if (!slots.ok()) return slots.status();
    return std::unique_ptr<StateSlots>(std::move(*slots));
  }

  absl::Status RunBatch(int lane, const BatchKey& key,
                        absl::Span<ConvSegment* const> segments,
                        BatchStats* stats) override;

  ThreadPool* pool() { return pool_.get(); }

 private:
  CpuBackend(std::unique_ptr<ThreadPool> pool, int lanes)
      : pool_(std::move(pool)), lanes_(lanes) {}

  const std::unique_ptr<ThreadPool> pool_;
  const int lanes_;
};

}  // namespace conv1d

#endif  // CONV1D_SERVER_BACKENDS_CPU_CPU_BACKEND_H_
