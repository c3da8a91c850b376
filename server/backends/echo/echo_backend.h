// EchoBackend: a Backend that computes nothing and copies input bytes to
// outputs. It measures the serving path (frontend, scheduler, lanes) without
// compute, i.e. the transport ceiling for benchmarks, and lets end-to-end
// tests run without a conv implementation.
//
// What each output receives (bytes, not values; dtypes are ignored):
//   y              <- x
//   dx             <- dout, or x when dout is absent
//   conv_state_out <- conv_state
//   final_states   <- initial_states
//   dinitial_states<- dfinal_states, else initial_states
//   dweight        <- weight
//   dbias          <- bias
// The first min(output, input) bytes are copied; any remainder of the output,
// or the whole output when no such input is present, is zero-filled.
//
// Thread-safety: RunBatch may be called concurrently for different lanes; the
// backend holds no mutable state.
#ifndef CONV1D_SERVER_BACKENDS_ECHO_ECHO_BACKEND_H_
#define CONV1D_SERVER_BACKENDS_ECHO_ECHO_BACKEND_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "server/core/backend.h"
#include "server/core/conv_problem.h"

namespace conv1d {

struct EchoBackendOptions {
  // Lanes the scheduler starts; valid range 1..1024 (INVALID_ARGUMENT outside).
  int lanes = 2;
};

class EchoBackend final : public Backend {
 public:
  static absl::StatusOr<std::unique_ptr<EchoBackend>> Create(
      EchoBackendOptions options);

  const char* name() const override { return "echo"; }
  std::vector<std::string> devices() const override { return {"echo (no compute)"}; }
  int num_lanes() const override { return lanes_; }

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

  // Copies one segment as described above; exposed for tests and tools.
  static void EchoSegment(const ConvSegment& segment);

 private:
  explicit EchoBackend(int lanes) : lanes_(lanes) {}

  const int lanes_;
};

}  // namespace conv1d

#endif  // CONV1D_SERVER_BACKENDS_ECHO_ECHO_BACKEND_H_
